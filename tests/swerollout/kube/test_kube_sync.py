"""The blocking KubeClient is the async client behind a portal thread: every async operation
has its blocking twin, answers and errors come back as the async client makes them, a watch
left early closes its connection, and a script that never closes its client still exits.
Against a real HTTP server (a small one in a thread), no API server needed."""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from swerollout.client import AsyncRolloutClient, RolloutClient
from swerollout.kube import CONFIGMAPS, AsyncKubeClient, KubeClient, KubeConfig, NotFound

CONFIGMAPS_PATH = "/api/v1/namespaces/ns/configmaps"


class _Server:
    def __init__(self) -> None:
        self.watch_closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == CONFIGMAPS_PATH and query.get("watch") == "true":
                    server.stream_events(self)
                elif url.path == CONFIGMAPS_PATH:
                    page = 1 if query.get("continue") == "next" else 0
                    more = {"continue": "next"} if page == 0 else {}
                    self._json(200, {"kind": "ConfigMapList", "metadata": more, "items": [{"n": page}]})
                elif url.path == f"{CONFIGMAPS_PATH}/missing":
                    self._json(404, {"kind": "Status", "reason": "NotFound", "code": 404, "message": "not here"})
                else:
                    self._json(200, {"kind": "ConfigMap", "metadata": {"name": url.path.rsplit("/", 1)[-1]}})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def stream_events(self, handler: BaseHTTPRequestHandler) -> None:
        """Events without end, one every 20 ms, until the reader hangs up."""
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        rv = 0
        try:
            while True:
                rv += 1
                line = {"type": "ADDED", "object": {"metadata": {"name": f"c{rv}", "resourceVersion": str(rv)}}}
                handler.wfile.write(json.dumps(line).encode() + b"\n")
                handler.wfile.flush()
                time.sleep(0.02)
        except OSError:
            self.watch_closed.set()


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    running = _Server()
    yield running
    running.http.shutdown()
    running.http.server_close()


@pytest.fixture
def kube(server: _Server) -> Iterator[KubeClient]:
    with KubeClient(KubeConfig(server=server.url), timeout=10) as client:
        yield client


def _operations(cls: type) -> set[str]:
    return {
        name
        for name, member in vars(cls).items()
        if not name.startswith("_") and (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member))
    }


def test_every_async_operation_has_its_blocking_twin_with_the_same_parameters() -> None:
    operations = _operations(AsyncKubeClient) - {"aclose"}
    assert {"get", "list", "watch", "iter_items", "patch_status", "request_token"} <= operations
    for name in operations:
        blocking = getattr(KubeClient, name, None)
        assert blocking is not None, f"KubeClient has no {name}: add `{name} = blocking(AsyncKubeClient.{name})`"
        assert inspect.signature(blocking) == inspect.signature(getattr(AsyncKubeClient, name)), name


def test_the_blocking_rollout_client_is_the_async_one_method_for_method() -> None:
    # The trainer's facade on the same portal: each operation wraps the async method itself.
    operations = [n for n, member in vars(RolloutClient).items() if inspect.isfunction(member) and n[0] != "_"]
    assert {"submit_batch", "result", "abort", "resume", "stream_results"} <= set(operations)
    for name in operations:
        assert getattr(RolloutClient, name).__wrapped__ is getattr(AsyncRolloutClient, name), name


def test_answers_errors_and_pages_come_back_as_the_async_client_makes_them(kube: KubeClient) -> None:
    assert kube.get(CONFIGMAPS, "a", "ns")["metadata"]["name"] == "a"
    with pytest.raises(NotFound) as missing:
        kube.get(CONFIGMAPS, "missing", "ns")
    assert (missing.value.status, missing.value.message) == (404, "not here")
    assert [item["n"] for item in kube.iter_items(CONFIGMAPS, "ns")] == [0, 1], "the continue token was followed"
    # Shared by threads: their calls run side by side on the one portal loop.
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda i: kube.get(CONFIGMAPS, f"c{i}", "ns")["metadata"]["name"], range(32)))
    assert names == [f"c{i}" for i in range(32)]


def test_a_watch_left_early_closes_its_connection(
    server: _Server, kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.watch_closed.clear()
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    seen = []
    for event in kube.watch(CONFIGMAPS, "ns"):
        seen.append(event.object["metadata"]["name"])
        if len(seen) == 3:
            break
    assert seen == ["c1", "c2", "c3"]
    gc.collect()
    assert not unraisable, "the stream was left to the garbage collector (outside its loop) instead of closed"
    assert server.watch_closed.wait(30), "the server still streams to a reader that left"
    assert kube.get(CONFIGMAPS, "after", "ns")["metadata"]["name"] == "after", "the client still works"


async def test_it_works_where_an_event_loop_already_runs(kube: KubeClient) -> None:
    loop = asyncio.get_running_loop()
    assert kube.get(CONFIGMAPS, "in-a-loop", "ns")["metadata"]["name"] == "in-a-loop"
    assert asyncio.get_running_loop() is loop


def test_a_closed_client_says_so(server: _Server) -> None:
    kube = KubeClient(KubeConfig(server=server.url))
    kube.close()
    kube.close()
    with pytest.raises(RuntimeError, match="KubeClient is closed"):
        kube.get(CONFIGMAPS, "a", "ns")


def test_a_script_that_never_closes_its_client_exits(tmp_path: Path, server: _Server) -> None:
    script = (
        "from swerollout.kube import CONFIGMAPS, KubeClient, KubeConfig\n"
        f"kube = KubeClient(KubeConfig(server={server.url!r}))\n"
        "print(kube.get(CONFIGMAPS, 'ok', 'ns')['metadata']['name'])\n"
    )
    # Generous for a loaded machine: the import alone takes seconds; a hang never ends.
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-3000:]
