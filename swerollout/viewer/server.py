"""The viewer's HTTP server (stdlib): the page, its two assets, and JSON for the batch
and for one rollout (decoded on first request, then kept)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from swerollout.viewer.digest import batch_summary, groups, rollout_detail
from swerollout.viewer.model import ViewRecord
from swerollout.viewer.page import SERVED_CSP, asset, embed_json, served_html

ASSETS = {"/static/viewer.js": ("viewer.js", "text/javascript"), "/static/viewer.css": ("viewer.css", "text/css")}


class Catalog:
    """The rollouts being viewed and what the pages ask of them."""

    def __init__(self, records: Sequence[ViewRecord], source: str) -> None:
        self.records = {r.name: r for r in records}
        self.source = source
        self._groups = groups(records)
        self._summary: dict[str, Any] | None = None
        self._details: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def summary(self) -> dict[str, Any]:
        if self._summary is None:
            self._summary = batch_summary(self.records.values(), self.source)
        return self._summary

    def detail(self, name: str) -> dict[str, Any] | None:
        record = self.records.get(name)
        if record is None:
            return None
        with self._lock:
            if name not in self._details:
                self._details[name] = rollout_detail(record, self._groups.get(name, ()))
            return self._details[name]

    def all_details(self) -> dict[str, dict[str, Any]]:
        return {name: detail for name in self.records if (detail := self.detail(name)) is not None}


def make_handler(catalog: Catalog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "swerollout-view"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return  # a viewer's access log is noise on the user's terminal

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", SERVED_CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
            self._send(status, embed_json(data).encode("utf-8"), "application/json; charset=utf-8")

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = urlsplit(self.path).path
            if path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, served_html().encode("utf-8"), "text/html; charset=utf-8")
            elif path in ASSETS:
                name, kind = ASSETS[path]
                self._send(HTTPStatus.OK, asset(name).encode("utf-8"), f"{kind}; charset=utf-8")
            elif path == "/api/batch":
                self._json(catalog.summary())
            elif path.startswith("/api/rollout/"):
                name = unquote(path.removeprefix("/api/rollout/"))
                detail = catalog.detail(name)
                if detail is None:
                    self._json({"error": f"no rollout named {name}"}, HTTPStatus.NOT_FOUND)
                else:
                    self._json(detail)
            else:
                self._send(HTTPStatus.NOT_FOUND, json.dumps({"error": "not found"}).encode(), "application/json")

    return Handler


def make_server(catalog: Catalog, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), make_handler(catalog))
    server.daemon_threads = True
    return server
