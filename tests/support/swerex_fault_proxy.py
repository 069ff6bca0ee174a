"""A plain-HTTP front of a real swerex-remote that answers chosen requests with an error
the server raises on a loaded machine, and forwards everything else.

Used where the real failure needs a scheduler we cannot command: pexpect giving up on a
SIGKILLed shell that has not gone yet. The injected answer is built the way swerex-remote's
own exception handler builds it, from a real pexpect exception.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

import httpx
import pexpect
from swerex.runtime.abstract import _ExceptionTransfer

_HOP_HEADERS = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}


def swerex_error_body(exc: Exception) -> bytes:
    """What swerex-remote answers (HTTP 511) for an exception its runtime raised."""
    transfer = _ExceptionTransfer(
        message=str(exc), class_path=f"{type(exc).__module__}.{type(exc).__name__}", traceback="", extra_info={}
    )
    return ('{"swerexception": ' + transfer.model_dump_json() + "}").encode()


UNKILLED_SHELL = swerex_error_body(pexpect.ExceptionPexpect("Could not terminate the child."))


class SwerexFaultProxy:
    def __init__(self, upstream_url: str) -> None:
        self._upstream = httpx.Client(base_url=upstream_url, timeout=60.0)
        self._lock = threading.Lock()
        self._faults: dict[str, list[bytes]] = {}
        self.forwarded: Counter[str] = Counter()
        """path -> requests that reached swerex-remote."""
        self.faulted: Counter[str] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                injected = proxy._take(self.path)
                if injected is not None:
                    return self._answer(511, injected, "application/json")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                answer = proxy._upstream.request(self.command, self.path, content=body, headers=headers)
                with proxy._lock:
                    proxy.forwarded[self.path] += 1
                self._answer(answer.status_code, answer.content, answer.headers.get("content-type", ""))

            def _answer(self, code: int, content: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def fail(self, path: str, body: bytes, times: int) -> None:
        """The next ``times`` requests to ``path`` are answered with ``body`` and never reach the server."""
        with self._lock:
            self._faults.setdefault(path, []).extend([body] * times)

    def _take(self, path: str) -> bytes | None:
        with self._lock:
            queue = self._faults.get(path) or []
            if not queue:
                return None
            self.faulted[path] += 1
            return queue.pop(0)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> SwerexFaultProxy:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()
