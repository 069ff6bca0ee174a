"""The runner's own log, kept in memory (the last MAX_LOG_BYTES) for upload to the store.

A pod's container log dies with the pod; the operator deletes pods as soon as a
rollout ends. The runner therefore uploads this tail with each final report (kind
`log`), and `swerollout logs` reads it back from the store for a finished rollout.
"""

from __future__ import annotations

import logging
from collections import deque

from swerollout.wire.ingest import MAX_LOG_BYTES

DROPPED_MARKER = b"[... earlier log lines dropped: the store keeps the last %d bytes ...]\n"


class LogTail(logging.Handler):
    """A logging handler keeping the newest ``limit`` bytes of formatted records."""

    def __init__(self, limit: int = MAX_LOG_BYTES - len(DROPPED_MARKER) - 16) -> None:
        super().__init__()
        self.limit = limit
        self._lines: deque[bytes] = deque()
        self._size = 0
        self.dropped = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", errors="replace")
        except Exception:  # noqa: BLE001 - a bad record must not break the runner
            self.handleError(record)
            return
        if len(line) > self.limit:
            line, self.dropped = line[-self.limit :], True
        self._lines.append(line)
        self._size += len(line)
        while self._size > self.limit:
            self._size -= len(self._lines.popleft())
            self.dropped = True

    def value(self) -> bytes:
        with self.lock if self.lock is not None else _NoLock():
            body = b"".join(self._lines)
        return (DROPPED_MARKER % self.limit if self.dropped else b"") + body


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
