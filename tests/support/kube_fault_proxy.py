"""A plain-HTTP front of the real API server that fails chosen requests the ways a
network and an overloaded API server do.

The client under test gets a kubeconfig whose server is this proxy; the proxy forwards
every request to the real kube-apiserver with the admin credentials and counts the
requests that reached it. A fault is taken, in order, by the next request of its method:

- ``"drop"``: the connection closes before the request is forwarded (it never ran);
- ``"lose"``: the request is forwarded (it ran) and the connection closes unanswered;
- ``503``: the request is forwarded (it ran) and the answer is replaced by a 503;
- ``429``: the request is refused with 429 and a Retry-After of one second (it never ran).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

import httpx
import yaml

from swerollout.kube import load_kubeconfig

Fault = Literal["drop", "lose", 503, 429]
_HOP_HEADERS = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "authorization"}


class FaultProxy:
    def __init__(self, admin_kubeconfig: Path) -> None:
        config = load_kubeconfig(admin_kubeconfig)
        self._upstream = httpx.Client(base_url=config.server, timeout=30.0, **config.http_options())
        self._lock = threading.Lock()
        self._faults: dict[str, list[Fault]] = {}
        self._armed_by: dict[str, tuple[str, list[Fault]]] = {}
        self.forwarded: Counter[tuple[str, str]] = Counter()
        """(method, path) -> requests that reached the API server."""
        self.faulted: list[tuple[str, str, Fault]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _serve(self) -> None:
                method, path = self.command, self.path
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy._take(method)
                if fault is not None:
                    proxy.faulted.append((method, path.split("?")[0], fault))
                if fault == "drop":
                    return self._reset()
                if fault == 429:
                    status = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "TooManyRequests",
                        "message": "too many requests, please try again later",
                        "code": 429,
                        "details": {"retryAfterSeconds": 1},
                    }
                    return self._answer(429, json.dumps(status).encode(), "application/json", {"Retry-After": "1"})
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                answer = proxy._upstream.request(method, path, content=body, headers=headers)
                with proxy._lock:
                    proxy.forwarded[(method, path.split("?")[0])] += 1
                if fault == "lose":
                    return self._reset()
                if fault == 503:
                    return self._answer(503, b"etcdserver: request timed out", "text/plain", {})
                self._answer(answer.status_code, answer.content, answer.headers.get("content-type", ""), {})

            def _answer(self, code: int, content: bytes, content_type: str, extra: dict[str, str]) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                for key, value in extra.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(content)

            def _reset(self) -> None:
                # SO_LINGER 0: close with a TCP reset, as a dropped connection looks to the client.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, method: str) -> Fault | None:
        with self._lock:
            queue = self._faults.get(method) or []
            fault = queue.pop(0) if queue else None
            for waiting, (trigger, faults) in list(self._armed_by.items()):
                if trigger == method:
                    self._faults.setdefault(waiting, []).extend(faults)
                    del self._armed_by[waiting]
            return fault

    def fail(self, method: str, *faults: Fault, after: str | None = None) -> None:
        """The next ``len(faults)`` requests of ``method`` fail, one fault each, in order;
        with ``after``, only the requests that come after the next one of that method."""
        with self._lock:
            if after is None:
                self._faults.setdefault(method, []).extend(faults)
            else:
                self._armed_by[method] = (after, list(faults))

    def pending(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._faults.values()) + sum(len(f) for _, f in self._armed_by.values())

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def write_kubeconfig(self, path: Path, namespace: str) -> Path:
        """A kubeconfig that reaches the API server through this proxy (which adds the credentials)."""
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "proxy",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy", "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(document))
        return path


@contextmanager
def fault_proxy(admin_kubeconfig: Path) -> Iterator[FaultProxy]:
    proxy = FaultProxy(admin_kubeconfig)
    proxy._thread.start()
    try:
        yield proxy
    finally:
        proxy._server.shutdown()
        proxy._server.server_close()
        proxy._upstream.close()
