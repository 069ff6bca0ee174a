"""The server side of SGLang's native HTTP protocol: every request and response body.

This is the one module of the policy server that knows SGLang's field names
(see shared/notes/sglang-api.md). Requests are validated strictly: an unknown
field is a 400 that names it, because a typo such as ``max_tokens`` inside
``sampling_params`` would otherwise be silently ignored. Sampling parameters that
real SGLang accepts but this server does not implement are accepted and ignored
(listed in ``SamplingParams``) so a client written for SGLang keeps working.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SamplingParams(_Strict):
    """SGLang's ``sampling_params`` object (the subset that changes what we sample)."""

    max_new_tokens: int = Field(default=128, ge=0)
    """Upper bound on generated tokens; reaching it ends the request with finish_reason length."""
    temperature: float = Field(default=1.0, ge=0.0)
    """Softmax temperature; 0 means greedy (argmax)."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    top_k: int = -1
    """Keep only the k most likely tokens; -1 (or 0) keeps all."""
    stop_token_ids: list[int] | None = None
    """Extra token ids that end the turn (the tokenizer's EOS always does unless ignore_eos)."""
    stop: str | list[str] | None = None
    """Stop strings; the returned text is cut before the first match, output_ids are not."""
    skip_special_tokens: bool = True
    """Drop special tokens from the returned ``text`` (output_ids always keep them)."""
    ignore_eos: bool = False
    """Do not stop at the tokenizer's EOS / end-of-turn token."""
    sampling_seed: int | None = Field(
        default=None, validation_alias=AliasChoices("sampling_seed", "seed")
    )
    """Seed of this request's sampler; the same seed, prompt and weights give the same tokens.
    Also accepted as ``seed`` (older SGLang spelling)."""

    # Accepted for compatibility with SGLang clients, ignored by this server.
    min_new_tokens: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    no_stop_trim: bool | None = None
    spaces_between_special_tokens: bool | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    """Only one sample per request is supported (SGLang's ``n`` > 1 is rejected)."""

    @model_validator(mode="after")
    def _check_top_k(self) -> SamplingParams:
        if self.top_k < -1:
            raise ValueError("top_k must be -1 (all tokens) or a positive number")
        return self

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class GenerateRequest(_Strict):
    """POST /generate, token-in/token-out (a single request; batches are not supported)."""

    rid: str | None = None
    """Request id; abort_request matches it by prefix. Generated when absent."""
    input_ids: list[int] | None = None
    """The whole context, already chat-templated."""
    text: str | None = None
    """Alternative to input_ids: a prompt string that the server tokenizes."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    return_logprob: bool = False
    """Include meta_info.output_token_logprobs."""
    logprob_start_len: int = -1
    """Accepted for compatibility; input-token logprobs are not returned."""
    top_logprobs_num: int = Field(default=0, ge=0, le=0)
    """Top-k alternatives per position are not supported (must be 0)."""
    return_text_in_logprobs: bool = False
    """Fill the third element of each logprob entry with the token's text instead of null."""
    return_routed_experts: bool = False
    """Return meta_info.routed_experts (synthetic here: this server has no MoE layers)."""
    stream: bool = False
    """Server-sent events, one cumulative chunk per token, then ``data: [DONE]``."""

    @field_validator("sampling_params", mode="before")
    @classmethod
    def _null_means_defaults(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if (self.input_ids is None) == (self.text is None):
            raise ValueError("give exactly one of input_ids (token-in) or text")
        if self.input_ids is not None and not self.input_ids:
            raise ValueError("input_ids must not be empty")
        if self.rid is not None and not self.rid:
            raise ValueError("rid must not be empty (omit it to get a generated one)")
        return self


class FinishType(str, Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


class FinishReason(BaseModel):
    """SGLang's finish_reason: ``matched`` for stop, ``length`` for length, message for abort."""

    model_config = ConfigDict(extra="forbid")

    type: FinishType
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None
    status_code: int | None = None
    err_type: str | None = None

    def to_wire(self) -> dict[str, Any]:
        body = self.model_dump(mode="json", exclude_none=True)
        if self.type is FinishType.ABORT:
            # SGLang always sends these three keys with an abort, null when unknown.
            for key in ("message", "status_code", "err_type"):
                body.setdefault(key, None)
        return body


class MetaInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    weight_version: str
    finish_reason: FinishReason | None
    """None while a streamed request is still running."""
    output_token_logprobs: list[tuple[float, int, str | None]] | None = None
    routed_experts: str | None = None
    e2e_latency: float = 0.0


class GenerateResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str
    output_ids: list[int]
    meta_info: MetaInfo

    def to_wire(self) -> dict[str, Any]:
        body = self.model_dump(mode="json")
        meta = body["meta_info"]
        meta["finish_reason"] = (
            self.meta_info.finish_reason.to_wire() if self.meta_info.finish_reason else None
        )
        for optional in ("output_token_logprobs", "routed_experts"):
            if meta[optional] is None:
                del meta[optional]
        return body


class AbortRequest(_Strict):
    """POST /abort_request. ``rid`` is a PREFIX, as in SGLang; empty rid without abort_all is a no-op."""

    rid: str = ""
    abort_all: bool = False


class PauseMode(str, Enum):
    ABORT = "abort"
    """Abort in-flight requests (they return what they generated so far); hold new ones."""
    RETRACT = "retract"
    """Stop in-flight requests; after continue they restart from their prompt."""
    IN_PLACE = "in_place"
    """Freeze in-flight requests between two tokens; after continue they carry on."""


class PauseRequest(_Strict):
    mode: PauseMode = PauseMode.ABORT


class ContinueRequest(_Strict):
    pass


class UpdateWeightVersionRequest(_Strict):
    new_version: str = Field(min_length=1)
    abort_all_requests: bool = False
    """Abort every in-flight request before switching (SGLang's flag of the same name)."""


class UpdateWeightsFromDiskRequest(_Strict):
    """POST /update_weights_from_disk. There are no weights to load: only the version changes."""

    model_path: str = Field(min_length=1)
    load_format: str | None = None
    weight_version: str | None = Field(default=None, min_length=1)
    """New meta_info.weight_version; unchanged when absent."""
    abort_all_requests: bool = False


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
                raise ValueError(
                    f"messages[{index}].role must be system, user, assistant or tool, got {role!r}"
                )
        return self
