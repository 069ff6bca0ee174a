"""The one error family for talking to the Kubernetes API.

Every failure of the client (an HTTP status from the API server, a broken
connection, a bad kubeconfig) surfaces as a :class:`KubeError`. Callers decide on
``retryable``: 429, 5xx and transport failures may pass if tried again; the rest
(404, 409, 422, 403, ...) will not change by retrying the same request.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class StatusCause(BaseModel):
    """One entry of ``Status.details.causes``: which field is wrong and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = ""
    """Machine-readable cause, e.g. ``FieldValueRequired``."""
    message: str = ""
    field: str = ""
    """JSON path of the offending field, e.g. ``spec.instance.image``."""


class KubeError(Exception):
    """Root of every error this package raises."""

    retryable: bool = False
    """Whether the same request may succeed later."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        causes: tuple[StatusCause, ...] = (),
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        """HTTP status code from the API server (0 when none was received)."""
        self.reason = reason
        """The Status ``reason`` (``NotFound``, ``AlreadyExists``, ``Invalid``, ...)."""
        self.causes = causes
        self.body = body or {}
        """The raw Status object the server sent, when it sent one."""
        details = self.body.get("details") or {}
        self.retry_after_seconds: float | None = (
            float(details["retryAfterSeconds"]) if isinstance(details.get("retryAfterSeconds"), int | float) else None
        )
        """The server's own hint (429, some 5xx) for how long to wait before retrying."""

    def __str__(self) -> str:
        head = f"{self.status} {self.reason}: " if self.status else ""
        return head + self.message


class ConfigError(KubeError):
    """The kubeconfig or in-cluster identity cannot be loaded; fix the file/env."""


class TransportError(KubeError):
    """The request never got an HTTP answer (connection refused, reset, timeout)."""

    retryable = True


class ApiError(KubeError):
    """The API server answered with an error status."""


class BadRequest(ApiError):
    """400: the request is malformed (e.g. a bad patch body or selector)."""


class Unauthorized(ApiError):
    """401: the credentials were not accepted (expired or wrong token/cert)."""


class Forbidden(ApiError):
    """403: authenticated but RBAC (or an admission rule) denies the request."""


class NotFound(ApiError):
    """404: the object (or the resource type) does not exist."""


class MethodNotAllowed(ApiError):
    """405: the resource does not support this verb."""


class Conflict(ApiError):
    """409 Conflict: stale resourceVersion or failed precondition; re-read and retry."""


class AlreadyExists(Conflict):
    """409 AlreadyExists: an object with this name already exists."""


class Gone(ApiError):
    """410: the resourceVersion is too old (watch expired); relist and watch again."""


class Invalid(ApiError):
    """422: the object failed validation; ``causes`` names each bad field."""


class TooManyRequests(ApiError):
    """429: throttled by API priority and fairness; retry after a pause."""

    retryable = True


class ServerError(ApiError):
    """5xx: the API server or etcd had trouble; retrying may help."""

    retryable = True


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(code: int, body: dict[str, Any] | None, fallback_text: str = "") -> ApiError:
    """Map an error answer (a ``Status`` object, or any text) to the right error class."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or fallback_text or f"HTTP {code}")
    details = body.get("details") or {}
    causes = tuple(
        StatusCause(
            reason=str(c.get("reason") or ""), message=str(c.get("message") or ""), field=str(c.get("field") or "")
        )
        for c in details.get("causes") or []
        if isinstance(c, dict)
    )
    if code == 409 and reason == "AlreadyExists":
        cls: type[ApiError] = AlreadyExists
    elif code >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(code, ApiError)
    return cls(message, status=code, reason=reason, causes=causes, body=body)


def error_from_response(code: int, content: bytes) -> ApiError:
    try:
        parsed = json.loads(content)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        return error_from_status(code, parsed)
    return error_from_status(code, None, content.decode("utf-8", "replace")[:2000])
