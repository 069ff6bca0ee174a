"""API keys, decided as SGLang 0.5.23 decides them (``sglang/srt/utils/auth.py``).

- ``/health*`` and OPTIONS are always open (probes, scrapers).
- Admin routes (SGLang marks them ADMIN_OPTIONAL: aborts, pause/continue, weight
  and version updates, flush_cache) need the admin key when one is set; with only
  an API key, that key; with neither, nothing.
- Every other route needs the API key when one is set (the admin key does not
  open them).
A refused request gets 401 ``{"error": "Unauthorized"}``, as from SGLang.
Our fault-injection route counts as an admin route.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

ADMIN_ROUTES = frozenset(
    {
        "/abort_request",
        "/pause_generation",
        "/continue_generation",
        "/update_weight_version",
        "/update_weights_from_disk",
        "/flush_cache",
    }
)
_OPEN_PREFIXES = ("/health", "/ready", "/metrics")


def _bearer_is(header: str | None, expected: str) -> bool:
    if not header:
        return False
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.encode(), expected.encode())


def allowed(
    method: str,
    path: str,
    authorization: str | None,
    *,
    api_key: str | None,
    admin_api_key: str | None,
    admin_routes: frozenset[str] = ADMIN_ROUTES,
) -> bool:
    if method == "OPTIONS" or path.startswith(_OPEN_PREFIXES):
        return True
    if path in admin_routes:
        key = admin_api_key or api_key
        return key is None or _bearer_is(authorization, key)
    return api_key is None or _bearer_is(authorization, api_key)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(api_key: str | None, admin_api_key: str | None, extra_admin: frozenset[str] = frozenset()) -> Middleware:
    routes = ADMIN_ROUTES | extra_admin

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not allowed(
            request.method,
            request.path,
            request.headers.get("Authorization"),
            api_key=api_key,
            admin_api_key=admin_api_key,
            admin_routes=routes,
        ):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check
