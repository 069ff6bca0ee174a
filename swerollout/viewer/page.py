"""The HTML of the viewer: one page that draws the batch, a rollout, or two side by side
(chosen by the URL's #fragment). Served, it loads /static assets and /api data; as a
report it inlines everything into one file that needs no network."""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

TITLE = "swerollout viewer"
# Served pages: only our own script, style and API; images only when inlined (data:).
SERVED_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@cache
def asset(name: str) -> str:
    return resources.files("swerollout.viewer").joinpath("static", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON that is safe inside a <script type="application/json"> element: no `<`, `>`
    or `&` can end the element or open a comment, whatever the strings hold."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _page(head: str, body_end: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{head}<title>{TITLE}</title></head>'
        '<body><header class="top"><h1><a href="#">swerollout</a></h1><span class="where" id="where"></span></header>'
        f'<main id="main"></main>{body_end}</body></html>\n'
    )


def served_html() -> str:
    return _page('<link rel="stylesheet" href="static/viewer.css">', '<script src="static/viewer.js"></script>')


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def report_html(batch: dict[str, Any], rollouts: dict[str, dict[str, Any]]) -> str:
    """One self-contained file: styles, script and every rollout's data inlined. The
    Content-Security-Policy allows exactly the inlined script and style (by hash)."""
    css, js = asset("viewer.css"), asset("viewer.js")
    csp = (
        f"default-src 'none'; script-src {_sha256(js)}; style-src {_sha256(css)}; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )
    head = f'<meta http-equiv="Content-Security-Policy" content="{csp}"><style>{css}</style>'
    data = embed_json({"batch": batch, "rollouts": rollouts})
    body_end = f'<script type="application/json" id="swerollout-data">{data}</script><script>{js}</script>'
    return _page(head, body_end)
