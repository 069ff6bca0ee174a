"""The seam between the agent loop and the policy.

The loop never sees tokens: it asks the model for a turn and hands it the
environment's reply. Token-tracking models (RLTokenModel) keep the exact token
ids, loss mask, logprobs and weight versions behind this interface; the
validation model (ChatModel) keeps only messages.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class FinishReason(str, Enum):
    STOP = "stop"
    """The model ended its turn (stop token or stop string)."""
    LENGTH = "length"
    """max_new_tokens or the context budget ran out mid-turn."""
    ABORT = "abort"
    """The inference server aborted the request (weight update, suspend): the run ends as partial."""


class ToolCall(BaseModel):
    """One parsed function call of the model's reply."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ModelTurn(BaseModel):
    """What the model produced in one turn."""

    model_config = ConfigDict(extra="forbid")

    text: str
    """Decoded reply (content; thinking included if the model emitted it)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Parsed function calls; empty for text-format agents or when none parsed."""
    parse_error: str | None = None
    """Why the reply's tool-call markup could not be parsed, if it could not."""
    finish_reason: FinishReason
    new_tokens: int = 0
    """Tokens sampled in this turn (0 for models without token tracking)."""


class Model(Protocol):
    """A conversation with the policy. Implementations own the message history."""

    async def generate(self, *, max_new_tokens: int | None = None) -> ModelTurn:
        """Sample the next assistant turn and append it to the history.

        Raises agent_runner.policy.errors.ModelError subclasses for API failures that
        survived the client's bounded retries; an abort is not an error but a
        turn with finish_reason ABORT.
        """
        ...

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        """Append environment messages (role `user` or `tool`, OpenAI shape) to the history."""
        ...

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far, OpenAI message shape."""
        ...

    @property
    def context_tokens(self) -> int:
        """Tokens the next request would send (0 when the model does not track tokens)."""
        ...
