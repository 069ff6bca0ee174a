"""The dev supervisor takes a port as its child's only when that child holds the listener."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from swerollout_dev.stack.supervisor import _listens


def test_a_listener_belongs_to_the_process_that_holds_it_not_to_whoever_asks() -> None:
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        assert not _listens(os.getpid(), mine.getsockname()[1]), "bound is not listening"
        mine.listen()
        assert _listens(os.getpid(), mine.getsockname()[1])
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen();"
            " print(s.getsockname()[1], flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        port = int(other.stdout.readline())
        deadline = time.monotonic() + 10
        while not _listens(other.pid, port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _listens(other.pid, port)
        # what a second dev stack saw: the port answers, but its own child does not hold it
        assert not _listens(os.getpid(), port)
    finally:
        other.kill()
        other.wait()
