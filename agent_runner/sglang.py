"""The runner's client of SGLang's native HTTP API (/generate token-in/token-out).

This is the one module of agent_runner that knows SGLang's field names
(shared/notes/sglang-api.md). Requests are pydantic models with extra="forbid";
response models ignore unknown fields on purpose, because every SGLang release adds
meta_info keys and a new key must not break a running fleet. Fields whose name moved
between versions accept both spellings.

Retry safety. Transport errors, timeouts, 5xx and 429 are retried a bounded number
of times with exponential backoff and full jitter (429/503 honour Retry-After).
A /generate whose connection dropped may still be running on the server, so before
re-sending, the client aborts the old rid (best effort) and the retry carries a NEW
rid. Only the response that was finally accepted is returned; the token buffer
appends nothing else, so a retried turn is never counted twice.

An abort (``finish_reason.type == "abort"``) is not an error: it is returned as a
normal result with ``finish == "abort"`` and whatever tokens were generated.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_runner.errors import ModelProtocolError, ModelTimeoutError, ModelUnavailableError

FinishType = Literal["stop", "length", "abort"]


# --- wire models -----------------------------------------------------------------------


class SamplingParams(BaseModel):
    """SGLang's ``sampling_params`` (the subset the runner sets)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(default=1024, ge=0)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    stop_token_ids: list[int] | None = None
    """Extra ids that end a turn; the model's EOS always does."""
    stop: list[str] | None = None
    skip_special_tokens: bool = False
    """False so the returned text shows the model's special tokens (tool-call markup)."""
    sampling_seed: int | None = None


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    return_logprob: bool = True
    return_routed_experts: bool = False

    def to_wire(self) -> dict[str, Any]:
        body = self.model_dump(exclude_none=True)
        if not self.return_routed_experts:
            # Older SGLang rejects unknown top-level keys; send it only when asked.
            body.pop("return_routed_experts")
        return body

    def to_json(self, ids_json: str | None = None) -> bytes:
        """The request body; ``ids_json`` (array items without brackets) replaces input_ids."""
        if ids_json is None:
            return json.dumps(self.to_wire(), separators=(",", ":")).encode()
        exclude = {"input_ids"} if self.return_routed_experts else {"input_ids", "return_routed_experts"}
        rest = self.model_dump_json(exclude=exclude, exclude_none=True)
        return ('{"input_ids":[' + ids_json + "]," + rest[1:]).encode()


class FinishReasonWire(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: FinishType
    matched: int | str | list[int] | None = None
    message: str | None = None
    status_code: int | None = None
    err_type: str | None = None


class MetaInfoWire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    weight_version: str | None = Field(
        default=None, validation_alias=AliasChoices("weight_version", "model_version")
    )
    finish_reason: FinishReasonWire | None = None
    output_token_logprobs: list[list[Any]] | None = None
    """[[logprob, token_id, text_or_null], ...]; some versions send [logprob, token_id] pairs."""
    routed_experts: Any = None

    @field_validator("finish_reason", mode="before")
    @classmethod
    def _string_finish(cls, value: Any) -> Any:
        # Some SGLang versions (and OpenAI-style proxies) send a bare string.
        return {"type": value} if isinstance(value, str) else value

    @field_validator("weight_version", mode="before")
    @classmethod
    def _version_to_text(cls, value: Any) -> Any:
        return None if value is None else str(value)


class GenerateResponseWire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    text: str = ""
    output_ids: list[int] = Field(validation_alias=AliasChoices("output_ids", "token_ids"))
    meta_info: MetaInfoWire


# --- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateResult:
    """The accepted answer of one /generate (after retries)."""

    rid: str
    output_ids: list[int]
    logprobs: list[float]
    """One per output id (an aborted request may have fewer; see ``aligned``)."""
    text: str
    finish: FinishType
    weight_version: str | None
    prompt_tokens: int
    routed_experts: Any = None
    attempts: int = 1
    abort_message: str | None = None

    @property
    def aligned(self) -> bool:
        return len(self.logprobs) == len(self.output_ids)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries; full-jitter exponential backoff, capped."""

    attempts: int = 4
    """Total tries of one request, first included."""
    base_delay: float = 0.5
    """Seconds before the first retry (before jitter); doubles each retry."""
    max_delay: float = 8.0
    """Cap of one backoff sleep, and of an honoured Retry-After, in seconds."""
    abort_timeout: float = 2.0
    """Seconds allowed for the best-effort abort of a dropped request's rid."""

    def backoff(self, retry: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**retry)))


# --- request ids -----------------------------------------------------------------------

_RID_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def make_rid(run_uid: str, turn: int, attempt: int) -> str:
    """``<run-uid>-t0007-a01-<8 hex>.``: unique, and never a prefix of another rid.

    SGLang aborts by prefix, so no rid may be a proper prefix of another. Every rid
    ends with ``.`` and has no other ``.`` (the uid is reduced to ``[A-Za-z0-9-]``):
    if rid A were a proper prefix of rid B, B would hold A's final ``.`` before its
    own end, a second ``.``. The random suffix makes rids unique across restarts.
    """
    return f"{run_rid_prefix(run_uid)}{turn:04d}-a{attempt:02d}-{secrets.token_hex(4)}."


def run_rid_prefix(run_uid: str) -> str:
    """The prefix shared by every rid of one run: ``abort(run_rid_prefix(uid))`` aborts them all.

    It matches no other run's rids as long as run uids are fixed-length (Kubernetes UIDs are).
    """
    return f"{_RID_UNSAFE.sub('-', run_uid) or 'run'}-t"


# --- the client ------------------------------------------------------------------------


class _Retryable(Exception):
    def __init__(self, message: str, *, retry_after: float | None = None, dropped: bool = False, timeout: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.dropped = dropped
        """The request may still run on the server (abort its rid before retrying)."""
        self.timeout = timeout


class SGLangClient:
    """Async client of one SGLang server. Use as ``async with`` or call ``aclose()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        rng: random.Random | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
        )

    async def __aenter__(self) -> SGLangClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        rid_for_attempt: Callable[[int], str],
        return_routed_experts: bool = False,
        timeout: float | None = None,
        input_ids_json: str | None = None,
    ) -> GenerateResult:
        """POST /generate; ``rid_for_attempt(n)`` names the n-th try (1-based), each one new.

        ``input_ids_json`` is an optional pre-encoded form of ``input_ids`` (JSON array
        items, no brackets), e.g. TokenBuffer.ids_json(); it must encode the same ids.
        """
        url = f"{self.base_url}/generate"
        last: _Retryable | None = None
        for attempt in range(1, self.retry.attempts + 1):
            rid = rid_for_attempt(attempt)
            request = GenerateRequest(
                rid=rid,
                input_ids=[] if input_ids_json is not None else input_ids,
                sampling_params=sampling,
                return_routed_experts=return_routed_experts,
            )
            try:
                body = await self._post_generate(request.to_json(input_ids_json), timeout)
                return _to_result(rid, body, attempt)
            except asyncio.CancelledError:
                # The caller gave up on this turn; do not leave it generating on the server.
                await asyncio.shield(self._abort_quietly(rid))
                raise
            except _Retryable as exc:
                last = exc
                if exc.dropped:
                    await self._abort_quietly(rid)
                if attempt == self.retry.attempts:
                    break
                delay = self.retry.backoff(attempt - 1, self._rng)
                if exc.retry_after is not None:
                    delay = min(max(delay, exc.retry_after), self.retry.max_delay)
                await self._sleep(delay)
        assert last is not None
        detail = f"POST {url} failed {self.retry.attempts} times; last error: {last}"
        if last.timeout:
            raise ModelTimeoutError(detail)
        raise ModelUnavailableError(detail)

    async def _post_generate(self, body: bytes, timeout: float | None) -> GenerateResponseWire:
        url = f"{self.base_url}/generate"
        try:
            response = await self._http.post(
                "/generate",
                content=body,
                headers={"content-type": "application/json"},
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.ConnectError as exc:
            raise _Retryable(f"cannot connect to SGLang at {self.base_url} ({exc}); is the server running?") from exc
        except httpx.TimeoutException as exc:
            raise _Retryable(f"no answer from {url} within the timeout", dropped=True, timeout=True) from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"connection to {url} dropped: {exc!r}", dropped=True) from exc
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(
                f"{url} answered HTTP {status}: {_snippet(response)}",
                retry_after=_retry_after(response.headers.get("retry-after")),
            )
        if status == 404:
            raise ModelProtocolError(
                f"is this an SGLang server? /generate not found at {url} (HTTP 404); "
                "point the inference endpoint at SGLang's base URL, without /v1"
            )
        if status >= 400:
            raise ModelProtocolError(f"{url} rejected the request with HTTP {status}: {_snippet(response)}")
        try:
            return GenerateResponseWire.model_validate_json(response.content)
        except ValidationError as exc:
            raise ModelProtocolError(
                f"{url} answered HTTP {status} with a body that is not an SGLang /generate response: {exc}"
            ) from exc

    async def abort(self, rid: str) -> None:
        """Ask the server to abort requests whose rid starts with ``rid``."""
        url = f"{self.base_url}/abort_request"
        try:
            response = await self._http.post("/abort_request", json={"rid": rid, "abort_all": False})
        except httpx.TransportError as exc:
            raise ModelUnavailableError(f"cannot reach {url} to abort rid {rid!r}: {exc!r}") from exc
        if response.status_code >= 400:
            raise ModelProtocolError(f"{url} answered HTTP {response.status_code}: {_snippet(response)}")

    async def _abort_quietly(self, rid: str) -> None:
        try:
            async with asyncio.timeout(self.retry.abort_timeout):
                await self.abort(rid)
        except (ModelUnavailableError, ModelProtocolError, TimeoutError):
            # Best effort: the server may be down; a retry still uses a new rid.
            pass

    async def health(self) -> bool:
        """True when GET /health answers 2xx."""
        try:
            response = await self._http.get("/health", timeout=min(self.timeout, 10.0))
        except httpx.TransportError:
            return False
        return response.is_success


def _to_result(rid: str, body: GenerateResponseWire, attempt: int) -> GenerateResult:
    meta = body.meta_info
    if meta.finish_reason is None:
        raise ModelProtocolError(f"/generate answered without meta_info.finish_reason (rid {rid})")
    logprobs: list[float] = []
    for entry in meta.output_token_logprobs or []:
        logprobs.append(float(entry[0]) if entry and entry[0] is not None else 0.0)
    finish = meta.finish_reason.type
    if finish != "abort" and len(logprobs) != len(body.output_ids):
        raise ModelProtocolError(
            f"/generate returned {len(body.output_ids)} output_ids but {len(logprobs)} logprobs "
            f"(rid {rid}); the runner needs return_logprob to cover every sampled token"
        )
    return GenerateResult(
        rid=rid,
        output_ids=list(body.output_ids),
        logprobs=logprobs,
        text=body.text,
        finish=finish,
        weight_version=meta.weight_version,
        prompt_tokens=meta.prompt_tokens,
        routed_experts=meta.routed_experts,
        attempts=attempt,
        abort_message=meta.finish_reason.message if finish == "abort" else None,
    )


def _snippet(response: httpx.Response, limit: int = 300) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:limit] + ("..." if len(text) > limit else "")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
        return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError):
        return None


def new_run_uid() -> str:
    """A random run id for callers without one (tests, benchmarks)."""
    return secrets.token_hex(6)
