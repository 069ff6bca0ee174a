"""Errors of the policy server; each says whether the caller may retry."""

from __future__ import annotations


class PolicyServerError(Exception):
    """Root of every policy-server error."""

    retryable: bool = False


class BadRequestError(PolicyServerError, ValueError):
    """The request is malformed; resending it unchanged fails again (HTTP 400)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InjectedFaultError(PolicyServerError):
    """A fault knob failed the request on purpose (HTTP 5xx); a retry may succeed."""

    retryable = True

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class PolicyConfigError(PolicyServerError):
    """The server cannot start with this configuration (unknown policy, bad tasks file)."""


class LaunchError(PolicyServerError, RuntimeError):
    """The server process did not become ready; its output is in the message."""
