"""Errors of the runner's model side (SGLang client, token bookkeeping, snapshots).

One root, ModelError. Each subclass says whether retrying can help through
``retryable``: the agent loop maps non-retryable ones to ``exit_api`` /
``exit_error`` at once and never loops on them.
"""

from __future__ import annotations


class ModelError(Exception):
    """Root of every model-side error of the runner."""

    retryable: bool = False


class ModelUnavailableError(ModelError, ConnectionError):
    """The inference server could not be reached or kept failing (connection, 5xx, 429)
    after the client's bounded retries. A later attempt may succeed."""

    retryable = True


class ModelTimeoutError(ModelError, TimeoutError):
    """A request exceeded its per-request timeout after the bounded retries."""

    retryable = True


class ModelProtocolError(ModelError):
    """The server answered, but not like SGLang (404 on /generate, 4xx, a malformed body).
    Retrying does not help: fix the endpoint URL or the request."""


class ContextBudgetError(ModelError):
    """The context is already full: no token can be generated (maps to exit_context)."""


class ChatTemplateError(ModelError):
    """The tokenizer's chat template cannot render what the runner needs (no template,
    or it rejects environment messages after an assistant turn)."""


class SnapshotError(ModelError):
    """A snapshot blob cannot be restored: corrupted, truncated, or of an unknown version."""
