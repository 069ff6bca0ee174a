"""The stand-in's own bodies: fault injection (a stand-in-only route) and the
OpenAI-compatible chat completions. SGLang's native bodies live in
swerollout/wire/sglang.py, shared with the runner, and are re-exported here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swerollout_dev.policy_server.images import ImageRecord


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# SGLang's own routes: one home, shared with the runner (swerollout/wire/sglang.py).
from swerollout.wire.sglang import (  # noqa: E402
    AbortRequest,
    ContinueRequest,
    FinishReason,
    GenerateRequest,
    GenerateResponse,
    MetaInfo,
    PauseMode,
    PauseRequest,
    SamplingParams,
    UpdateWeightsFromDiskRequest,
    UpdateWeightVersionRequest,
)

__all__ = [
    "AbortRequest",
    "ContinueRequest",
    "FinishReason",
    "GenerateRequest",
    "GenerateResponse",
    "MetaInfo",
    "PauseMode",
    "PauseRequest",
    "SamplingParams",
    "UpdateWeightsFromDiskRequest",
    "UpdateWeightVersionRequest",
]


class FaultSettings(_Strict):
    """Failure injection for tests; every knob is off by default."""

    delay_per_token: float = Field(default=0.0, ge=0.0)
    """Seconds slept after each generated token (makes aborts land mid-generation)."""
    abort_after_tokens: int | None = Field(default=None, ge=0)
    """Abort every request after it generated this many tokens (finish_reason abort)."""
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Probability that a generation request fails with HTTP 500 (seeded random)."""
    fail_next: int = Field(default=0, ge=0)
    """Fail the next N generation requests with HTTP 503, then serve normally."""


class FaultsUpdate(_Strict):
    """POST /faults: the knobs to change; absent fields keep their value."""

    delay_per_token: float | None = Field(default=None, ge=0.0)
    abort_after_tokens: int | None = Field(default=None, ge=0)
    error_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    fail_next: int | None = Field(default=None, ge=0)
    clear_abort_after_tokens: bool = False
    """Turn abort_after_tokens off (null cannot mean "off" because absent means "unchanged")."""


class RequestRecord(_Strict):
    """One admitted /generate (chat completions included), as GET /_standin/requests lists it."""

    rid: str
    route: Literal["generate", "chat"]
    sent_tokens: int
    """len(input_ids) as the client sent them (one placeholder token per image)."""
    prompt_tokens: int
    """The prompt the model read: image placeholders expanded (meta_info.prompt_tokens)."""
    images: list[ImageRecord] = Field(default_factory=list)
    """image_data, in order."""


# --- OpenAI-compatible chat completions (for the validation ChatAgent) -----------------


class ChatToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)


class ChatTool(_Strict):
    type: Literal["function"] = "function"
    function: ChatToolFunction


class ChatCompletionRequest(_Strict):
    """POST /v1/chat/completions, non-streaming. Unknown fields are rejected by name."""

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    stream: Literal[False] = False
    """Streaming chat is not supported."""
    rid: str | None = None
    """SGLang extension: request id for abort_request."""
    # Accepted for compatibility, ignored.
    user: str | None = None
    parallel_tool_calls: bool | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _roles(self) -> ChatCompletionRequest:
        for index, message in enumerate(self.messages):
            role = message.get("role")
            if role not in {"system", "user", "assistant", "tool", "developer"}:
                raise ValueError(f"messages[{index}].role must be system, user, assistant or tool, got {role!r}")
        return self
