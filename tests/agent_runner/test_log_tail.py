"""The runner keeps the newest MAX_LOG_BYTES of its own log for the result store."""

from __future__ import annotations

import logging

from agent_runner.pod.log_tail import LogTail
from swerollout.wire.ingest import MAX_LOG_BYTES


def _logger(tail: LogTail) -> logging.Logger:
    logger = logging.getLogger(f"test-log-tail-{id(tail)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(tail)
    return logger


def test_keeps_every_line_while_it_fits() -> None:
    tail = LogTail(limit=1000)
    logger = _logger(tail)
    logger.info("first")
    logger.warning("second: %s", "é")
    assert tail.value() == "first\nsecond: é\n".encode()


def test_keeps_the_newest_lines_within_the_bound_and_says_so() -> None:
    tail = LogTail()
    logger = _logger(tail)
    for i in range(40_000):
        logger.info("line %06d %s", i, "x" * 40)
    data = tail.value()
    assert len(data) <= MAX_LOG_BYTES
    assert data.startswith(b"[... earlier log lines dropped")
    assert data.endswith(b"line 039999 " + b"x" * 40 + b"\n")
    assert b"line 000000 " not in data
    # Whole lines only after the marker.
    assert all(line.startswith(b"line ") for line in data.splitlines()[1:])


def test_one_huge_line_keeps_its_end() -> None:
    tail = LogTail(limit=100)
    _logger(tail).info("a" * 500 + "END")
    data = tail.value()
    assert data.endswith(b"END\n") and len(data) <= 100 + len(
        b"[... earlier log lines dropped: the store keeps the last 100 bytes ...]\n"
    )
