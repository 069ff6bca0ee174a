"""SGLang's native HTTP protocol (0.5.23): the one home of its request and response bodies.

Both sides use these models: the runner's client (agent_runner/policy/sglang.py) and the
SGLang stand-in (swerollout's dev policy server). Shapes, defaults and validation
follow the sglang 0.5.23 wheel, and tests/…/test_sglang_contract.py checks them
against that wheel's own code (docs/sglang-protocol.md says what is sent and read).

Validation matches the real server where the real server is strict and lenient
where it is lenient:
- ``sampling_params`` rejects unknown keys (SGLang's contract gate answers 400), and
  ``top_k``, ``top_p``, ``temperature``, ``min_p``, penalties and ``sampling_seed``
  are range-checked as ``SamplingParams.verify`` does;
- the top level of ``/generate`` and the control routes ignore unknown keys, as
  the real server does;
- response models ignore unknown keys, because every SGLang release adds meta_info
  fields and a new field must not break a running fleet. Fields whose name moved
  between releases accept both spellings.
"""

from __future__ import annotations

import base64
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

UNSET_WEIGHT_VERSION = "default"
"""What a server reports before any trainer set a version: it means "no version"."""

CONTEXT_MARGIN = 5
"""SGLang's scheduler keeps 5 tokens of every request's room for itself:
``max_req_input_len = max_req_len - 5`` (managers/tp_worker.py)."""

FinishType = Literal["stop", "length", "abort"]
PauseMode = Literal["abort", "retract", "in_place"]


class _Lenient(BaseModel):
    """Unknown keys are ignored, as SGLang's own parsers do."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


# --- POST /generate: the request ------------------------------------------------------


class SamplingParams(BaseModel):
    """``sampling_params``. Unknown keys are a 400 on the real server, so here too.

    Defaults are SGLang's. ``seed`` is not a key (only ``sampling_seed``, which the
    server honours only when launched with deterministic inference).
    """

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = Field(default=128, ge=0)
    temperature: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    """0 means greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    """-1 keeps every token; 0 is refused (SGLang: "-1 (disable) or at least 1")."""
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=2.0)
    min_new_tokens: int = Field(default=0, ge=0)
    n: int = Field(default=1, ge=1)
    stop: str | list[str] | None = None
    """Stop strings; ``output_ids`` keep the whole match, ``text`` is cut before it."""
    stop_token_ids: list[int] | None = None
    """Extra ids that end a turn; the model's EOS always does unless ``ignore_eos``."""
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)

    @model_validator(mode="after")
    def _verify(self) -> SamplingParams:
        # The checks of sglang's SamplingParams.verify that a field bound cannot say.
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}")
        if self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens ({self.min_new_tokens}) must not exceed max_new_tokens ({self.max_new_tokens})"
            )
        return self

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class GenerateRequest(_Lenient):
    """POST /generate, one request (SGLang's batch forms are not used by swerollout)."""

    rid: str | None = None
    """Request id; /abort_request matches it EXACTLY at the HTTP layer (see AbortRequest)."""
    input_ids: list[int] | None = None
    """The whole context, already chat-templated (token-in)."""
    text: str | None = None
    """Alternative to input_ids: a prompt the server tokenizes."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    return_logprob: bool = False
    """Include meta_info.output_token_logprobs."""
    logprob_start_len: int = -1
    """-1: logprobs of output tokens only (the only form the runner uses)."""
    top_logprobs_num: int = Field(default=0, ge=0)
    return_text_in_logprobs: bool = False
    return_routed_experts: bool = False
    """MoE routing replay; answered only by servers run with --enable-return-routed-experts."""
    routed_experts_start_len: int = Field(default=0, ge=0)
    """First token position whose routing rows are returned (0: from the prompt's start)."""
    stream: bool = False
    image_data: str | list[str | dict[str, Any] | None] | None = None
    """Images of a multimodal prompt, one per image placeholder token in ``input_ids``, in
    order: an http(s) URL (the server downloads it), a data URL, or SGLang's ``{"url": ...}``
    object. The server expands each placeholder into the image's tokens (see images())."""

    @field_validator("sampling_params", mode="before")
    @classmethod
    def _null_means_defaults(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        # SGLang: "Either text, input_ids or input_embeds should be provided." (400)
        if self.input_ids is None and self.text is None:
            raise ValueError("input_ids: give input_ids (token-in) or text")
        return self

    def images(self) -> list[str]:
        """``image_data`` as a list of URLs, as SGLang normalizes one request's images
        (a single item is a list of one; an object stands for its ``url``)."""
        if self.image_data is None:
            return []
        items = self.image_data if isinstance(self.image_data, list) else [self.image_data]
        urls: list[str] = []
        for index, item in enumerate(items):
            url = item.get("url") if isinstance(item, dict) else item
            if not isinstance(url, str) or not url:
                raise ValueError(f"image_data[{index}]: an image is a URL string or an object with a url")
            urls.append(url)
        return urls

    def to_wire(self) -> dict[str, Any]:
        """The JSON body: exactly the fields the sender set (SGLang fills in its defaults)."""
        body = self.model_dump(exclude_none=True, exclude_unset=True)
        body["sampling_params"] = self.sampling_params.model_dump(exclude_none=True, exclude_unset=True)
        return body


# --- POST /generate: the response -----------------------------------------------------


class FinishReason(_Lenient):
    """``meta_info.finish_reason``: stop (``matched`` id or string), length, or abort."""

    type: FinishType
    matched: int | str | list[int] | None = None
    length: int | None = None
    message: str | None = None
    status_code: int | None = None
    err_type: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """SGLang's to_json shapes: abort always carries message/status_code/err_type."""
        if self.type == "stop":
            return {"type": "stop", "matched": self.matched}
        if self.type == "length":
            return {"type": "length", "length": self.length}
        return {"type": "abort", "message": self.message, "status_code": self.status_code, "err_type": self.err_type}


def _logprob_entry(value: Any) -> Any:
    # Older releases sent [logprob, id] pairs; SGLang writes non-finite floats as null.
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return [value[0], value[1], None]
    return value


LogprobEntry = Annotated[tuple[float | None, int, str | None], BeforeValidator(_logprob_entry)]
"""``[logprob, token_id, text_or_null]``; a null logprob is a non-finite value on the server."""


class WeightVersionSpan(_Lenient):
    """Output tokens ``[start, end)`` were sampled by weights ``version``."""

    version: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)


class MetaInfo(_Lenient):
    id: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    weight_version: str | None = Field(default=None, validation_alias=AliasChoices("weight_version", "model_version"))
    """The version of the last span; ``"default"`` until a trainer set one (UNSET_WEIGHT_VERSION)."""
    weight_versions: list[WeightVersionSpan] | None = None
    """Present when the weights changed while the request was alive."""
    finish_reason: FinishReason | None = None
    """None only on a streamed chunk of a request still running."""
    output_token_logprobs: list[LogprobEntry] | None = None
    routed_experts: str | None = None
    """Base64 of int32 ``[seqlen - 1 - routed_experts_start_len, layers, top_k]`` over prompt + output."""
    e2e_latency: float | None = None

    @field_validator("finish_reason", mode="before")
    @classmethod
    def _string_finish(cls, value: Any) -> Any:
        # Some releases (and OpenAI-style proxies) send a bare string.
        return {"type": value} if isinstance(value, str) else value

    @field_validator("weight_version", mode="before")
    @classmethod
    def _version_to_text(cls, value: Any) -> Any:
        return None if value is None else str(value)

    def to_wire(self) -> dict[str, Any]:
        body = self.model_dump(mode="json", exclude_none=True)
        body["finish_reason"] = self.finish_reason.to_wire() if self.finish_reason else None
        return body


class GenerateResponse(_Lenient):
    text: str = ""
    output_ids: list[int] = Field(validation_alias=AliasChoices("output_ids", "token_ids"))
    meta_info: MetaInfo

    def to_wire(self) -> dict[str, Any]:
        return {"text": self.text, "output_ids": list(self.output_ids), "meta_info": self.meta_info.to_wire()}


def encode_routed_experts(rows: list[list[int]]) -> str:
    """Base64 of little-endian int32 rows (each row: layers x top_k expert ids, flattened)."""
    flat = [value for row in rows for value in row]
    return base64.b64encode(b"".join(int(v).to_bytes(4, "little", signed=True) for v in flat)).decode("ascii")


def decode_routed_experts(payload: str) -> bytes:
    """The raw little-endian int32 bytes of a routed-experts payload."""
    raw = base64.b64decode(payload, validate=True)
    if len(raw) % 4:
        raise ValueError(f"routed_experts holds {len(raw)} bytes, not a whole number of int32 values")
    return raw


def finite_or_none(value: float) -> float | None:
    """How SGLang writes a logprob: non-finite floats become null."""
    return value if math.isfinite(value) else None


# --- control routes -------------------------------------------------------------------


class AbortRequest(_Lenient):
    """POST /abort_request. Answers an empty 200 whether or not anything matched.

    At the HTTP layer (TokenizerManager.abort_request, one tokenizer worker) ``rid``
    must be the EXACT rid of a live request; any other rid is dropped silently.
    An empty rid without ``abort_all`` is ignored.
    """

    rid: str = ""
    abort_all: bool = False


class PauseRequest(_Lenient):
    """POST /pause_generation; answers ``{"message": ..., "status": "ok"}``."""

    mode: PauseMode = "abort"


class ContinueRequest(_Lenient):
    """POST /continue_generation; answers ``{"message": ..., "status": "ok"}``."""

    torch_empty_cache: bool = True


class UpdateWeightVersionRequest(_Lenient):
    """POST /update_weight_version. The real server aborts every request first by default."""

    new_version: str
    abort_all_requests: bool = True


class UpdateWeightsFromDiskRequest(_Lenient):
    """POST /update_weights_from_disk."""

    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


class StatusMessage(_Lenient):
    """The body of /pause_generation and /continue_generation."""

    message: str
    status: str = "ok"


class UpdateResult(_Lenient):
    """The body of /update_weight_version and /update_weights_from_disk."""

    success: bool
    message: str
    new_version: str | None = None
    num_paused_requests: int | None = None


# --- info routes ----------------------------------------------------------------------


class ModelInfo(_Lenient):
    """GET /get_model_info (alias /model_info)."""

    model_path: str = ""
    served_model_name: str = ""
    tokenizer_path: str | None = None
    is_generation: bool = True
    weight_version: str | None = None
    # Older releases (and our stand-in) also report the context length here.
    context_length: int | None = Field(
        default=None, validation_alias=AliasChoices("context_length", "max_context_length")
    )


class ServerInfo(_Lenient):
    """GET /get_server_info (alias /server_info): the resolved server args plus scheduler info."""

    context_length: int | None = Field(
        default=None, validation_alias=AliasChoices("context_length", "max_context_length")
    )
    max_total_num_tokens: int | None = None
    """KV cache capacity in tokens."""
    max_req_input_len: int | None = None
    """The longest prompt admitted is ``max_req_input_len - 1`` tokens."""
    enable_return_routed_experts: bool | None = None
    enable_deterministic_inference: bool | None = None
    version: str = ""


class ContextLimits(BaseModel):
    """The token limits one server enforces, as its scheduler computes them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_length: int = Field(gt=0)
    max_req_len: int = Field(gt=0)
    """``min(context_length - 1, kv_capacity - 1)``: prompt + output of one request stays below it."""

    @property
    def max_req_input_len(self) -> int:
        return self.max_req_len - CONTEXT_MARGIN

    @classmethod
    def of(cls, context_length: int, kv_capacity: int | None = None) -> ContextLimits:
        limit = context_length - 1 if kv_capacity is None else min(context_length - 1, kv_capacity - 1)
        return cls(context_length=context_length, max_req_len=limit)

    @classmethod
    def from_info(cls, server: ServerInfo | None, model: ModelInfo | None = None) -> ContextLimits | None:
        """Limits from the info routes, or None when they say nothing usable."""
        context = (server.context_length if server else None) or (model.context_length if model else None)
        if server is not None and server.max_req_input_len:
            max_req_len = server.max_req_input_len + CONTEXT_MARGIN
            return cls(context_length=context or max_req_len + 1, max_req_len=max_req_len)
        if context:
            return cls.of(context, server.max_total_num_tokens if server else None)
        return None

    def prompt_fits(self, prompt_tokens: int) -> bool:
        """SGLang refuses a prompt of ``len >= max_req_input_len`` (HTTP 400)."""
        return prompt_tokens < self.max_req_input_len

    def max_new_tokens(self, prompt_tokens: int) -> int:
        """The most new tokens one request may ask for: the scheduler caps it at
        ``max_req_len - prompt - 1`` and the tokenizer refuses ``prompt + n > context_length``."""
        return max(0, min(self.max_req_len - prompt_tokens - 1, self.context_length - prompt_tokens))


# The messages of SGLang's too-long refusals (tokenizer_manager._validate_one_request,
# managers/utils.validate_input_length), answered as HTTP 400.
CONTEXT_REFUSALS = (
    "is longer than the model's context length",
    "exceeds the maximum allowed length",
    "exceeds the model's maximum context length",
    "Multimodal prompt is too long",
)


def is_context_refusal(message: str) -> bool:
    return any(marker in message for marker in CONTEXT_REFUSALS)
