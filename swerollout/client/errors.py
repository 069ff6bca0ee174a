"""Errors of the trainer client. Each message names what is wrong and how to fix it.

``retryable`` says whether calling again unchanged may succeed (an unreachable
endpoint or store may come back; a missing CRD will not appear by itself).
"""

from __future__ import annotations


class ClientError(Exception):
    """Root of every error the trainer client raises."""

    retryable: bool = False


class ClientConfigError(ClientError):
    """No usable Kubernetes credentials, or an argument the client cannot work with."""


class CrdNotInstalled(ClientError):
    """The API server does not serve swerollouts.swerollout.io."""


class NamespaceNotFound(ClientError):
    """The namespace the client was pointed at does not exist."""


class UnknownBatch(ClientError):
    """No SWERollout carries the batch label in this namespace."""


class RolloutNotFound(ClientError):
    """No SWERollout of that name in this namespace."""


class EndpointUnreachable(ClientError):
    """The inference endpoint did not answer its /health check."""

    retryable = True


class ResultUnavailable(ClientError):
    """A finished rollout's trajectory could not be fetched or decoded."""

    retryable = True


class WaitTimeout(ClientError):
    """The batch did not finish within the given timeout."""

    retryable = True


class KubeApiError(ClientError):
    """Any other failure of the Kubernetes API (the wrapped KubeError says which)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
