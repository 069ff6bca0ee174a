"""The runner's client of SGLang's native HTTP API (/generate token-in/token-out).

The bodies live in swerollout/wire/sglang.py, shared with the stand-in server; this
module owns what the runner does with them (docs/sglang-protocol.md):

- Limits. ``limits()`` reads the server's context length and max request input
  length from /get_server_info (or /get_model_info); the model budgets each request
  inside them with SGLang's margin. A 400 for a too-long prompt raises
  ContextBudgetError (the run ends ``exit_context``), never a protocol error.
- Aborts. SGLang's /abort_request drops any rid that is not the EXACT rid of a live
  request, so ``abort_in_flight()`` aborts each rid this client has in flight by
  name, and a call waiting to retry is not sent again.
- Retry safety. Transport errors, timeouts, 5xx and 429 are retried a bounded number
  of times, paced by swerollout.backoff (the one backoff rule; 429/503 honour Retry-After). A
  /generate whose connection dropped may still run on the server, so the old rid is
  aborted (best effort) and the retry carries a NEW rid. A response with a null
  (non-finite) logprob is an error of that turn: retried, then ModelProtocolError
  naming the position. Only the accepted response is returned; a retried turn is
  never counted twice.
- An abort (``finish_reason.type == "abort"``) is not an error: it is returned as a
  result with ``finish == "abort"`` and whatever tokens were generated.
- Fleets. The endpoint may be smg (SGLang's gateway) in front of many engines: every
  request carries the rollout's routing key (``routing_key``), so smg keeps its turns on one
  engine, and aborts and the pause check reach every engine (swerollout/fleet.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx
from pydantic import ValidationError

from agent_runner.policy.errors import ContextBudgetError, ModelProtocolError, ModelTimeoutError, ModelUnavailableError
from swerollout import fleet as fleets
from swerollout.backoff import Backoff
from swerollout.wire import sglang as wire
from swerollout.wire.sglang import ContextLimits, GenerateRequest, SamplingParams
from swerollout.wire.smg import ROUTING_KEY_HEADER

__all__ = [
    "ContextLimits",
    "GenerateRequest",
    "GenerateResult",
    "AbortRefused",
    "SGLangClient",
    "SamplingParams",
    "make_rid",
]

FinishType = Literal["stop", "length", "abort"]
log = logging.getLogger(__name__)


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
    """The server's version of the last span, None when it reported none or ``"default"``."""
    prompt_tokens: int
    token_versions: list[str | None] = field(default_factory=list)
    """Per output id, from ``meta_info.weight_versions`` spans when present
    (``"default"`` becomes None: the server had no version set)."""
    routed_experts: bytes | None = None
    """Raw little-endian int32 rows from ``routed_experts_start_len`` on, None when absent."""
    attempts: int = 1
    abort_message: str | None = None
    cached_tokens: int = 0
    """Prompt tokens the server took from its prefix cache (``meta_info.cached_tokens``)."""

    @property
    def aligned(self) -> bool:
        return len(self.logprobs) == len(self.output_ids)


GENERATE_BACKOFF = Backoff(first_seconds=0.5, max_seconds=8.0, attempts=4)
"""Bounded retries of one /generate (four tries, pauses capped at 8 s, Retry-After included)."""
ABORT_TIMEOUT_SECONDS = 2.0
"""Seconds allowed for one /abort_request (and the fleet's discovery and /ready reads)."""


# --- request ids -----------------------------------------------------------------------

_RID_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def make_rid(run_uid: str, turn: int, attempt: int) -> str:
    """``<run-uid>-t0007-a01-<8 hex>.``: unique, and never a prefix of another rid.

    SGLang's scheduler matches aborts by prefix, so no rid may be a proper prefix of
    another. Every rid ends with ``.`` and has no other ``.`` (the uid is reduced to
    ``[A-Za-z0-9-]``): if rid A were a proper prefix of rid B, B would hold A's final
    ``.`` before its own end, a second ``.``. The random suffix makes rids unique
    across restarts.
    """
    return f"{_RID_UNSAFE.sub('-', run_uid) or 'run'}-t{turn:04d}-a{attempt:02d}-{secrets.token_hex(4)}."


# --- the client ------------------------------------------------------------------------


class AbortRefused(ModelProtocolError):
    """The server refused /abort_request for want of its (admin) key."""


class _Retryable(Exception):
    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        dropped: bool = False,
        timeout: bool = False,
        protocol: bool = False,
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.dropped = dropped
        """The request may still run on the server (abort its rid before retrying)."""
        self.timeout = timeout
        self.protocol = protocol
        """The server answered, wrongly (e.g. a null logprob): reported as ModelProtocolError."""


@dataclass(eq=False)
class _Call:
    """One generate() call: the rid it has on the server now, and whether it was aborted."""

    rid: str | None = None
    aborted: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    post: asyncio.Future[wire.GenerateResponse] | None = None
    """The HTTP request of the current attempt."""
    abandoned: str | None = None
    """Why its connection was closed instead of aborting its rid (see abort_in_flight), if it was."""


class SGLangClient:
    """Async client of one SGLang server. Use as ``async with`` or call ``aclose()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 600.0,
        retry: Backoff = GENERATE_BACKOFF,
        abort_timeout: float = ABORT_TIMEOUT_SECONDS,
        headers: dict[str, str] | None = None,
        api_key: str | None = None,
        admin_key: str | None = None,
        routing_key: str | None = None,
        rng: random.Random | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry
        self.abort_timeout = abort_timeout
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._calls: set[_Call] = set()
        # SGLang's keys (docs/sglang-protocol.md, "Keys"): the API key opens every route
        # but the admin ones; aborts carry the admin key, or the API key when there is none.
        headers = dict(headers or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        if routing_key:
            # smg sends every request with this key to the same engine (its prefix cache);
            # an engine ignores the header.
            headers[ROUTING_KEY_HEADER] = routing_key
        admin = admin_key or api_key
        self._admin_headers = {"Authorization": f"Bearer {admin}"} if admin else {}
        self._fleet: fleets.Fleet | None = None
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

    @property
    def in_flight(self) -> list[str]:
        """The rids this client has on the server right now."""
        return [c.rid for c in self._calls if c.rid is not None]

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        rid_for_attempt: Callable[[int], str],
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        timeout: float | None = None,
        input_ids_json: str | None = None,
        image_data: list[str] | None = None,
    ) -> GenerateResult:
        """POST /generate; ``rid_for_attempt(n)`` names the n-th try (1-based), each one new.

        ``image_data``: the images of a multimodal prompt, one per image placeholder
        token in ``input_ids``, in order (sent with every turn: each request stands alone).

        ``input_ids_json`` is an optional pre-encoded form of ``input_ids`` (JSON array
        items, no brackets), e.g. TokenBuffer.ids_json(); it must encode the same ids.
        """
        if "skip_special_tokens" not in sampling.model_fields_set:
            # The returned text must show the model's special tokens (tool-call markup).
            sampling = sampling.model_copy(update={"skip_special_tokens": False})
        call = _Call()
        self._calls.add(call)
        try:
            return await self._generate(
                call,
                input_ids,
                sampling,
                rid_for_attempt,
                return_routed_experts,
                routed_experts_start_len,
                timeout,
                input_ids_json,
                image_data,
            )
        finally:
            self._calls.discard(call)

    async def _generate(
        self,
        call: _Call,
        input_ids: list[int],
        sampling: SamplingParams,
        rid_for_attempt: Callable[[int], str],
        return_routed_experts: bool,
        routed_experts_start_len: int,
        timeout: float | None,
        input_ids_json: str | None,
        image_data: list[str] | None = None,
    ) -> GenerateResult:
        url = f"{self.base_url}/generate"
        tries = 0

        def retrying(exc: BaseException, delay: float) -> None:
            log.warning("%s; retrying in %.1fs", exc, delay)

        loop = self.retry.retrying(
            retryable=lambda exc: isinstance(exc, _Retryable),
            retry_after=lambda exc: exc.retry_after if isinstance(exc, _Retryable) else None,
            on_retry=retrying,
            sleep=lambda delay: self._backoff(call, delay),
            rng=self._rng,
        )
        try:
            async for attempt in loop:
                with attempt:
                    tries += 1
                    rid = rid_for_attempt(tries)
                    if call.aborted:
                        # Aborted while waiting to retry: this attempt is never sent.
                        return _aborted(rid, tries, "aborted before the request was sent")
                    fields: dict[str, Any] = dict(
                        rid=rid,
                        input_ids=[] if input_ids_json is not None else input_ids,
                        sampling_params=sampling,
                        return_logprob=True,
                        logprob_start_len=-1,
                    )
                    if return_routed_experts:
                        # Only the rows this turn adds: the earlier ones are stored already.
                        fields.update(return_routed_experts=True, routed_experts_start_len=routed_experts_start_len)
                    if image_data:
                        fields.update(image_data=list(image_data))
                    request = GenerateRequest(**fields)
                    call.rid = rid
                    post = call.post = asyncio.ensure_future(
                        self._post_generate(encode_request(request, input_ids_json), timeout)
                    )
                    try:
                        body = await post
                        return _to_result(rid, body, tries)
                    except asyncio.CancelledError:
                        current = asyncio.current_task()
                        if call.abandoned and post.cancelled() and not (current is not None and current.cancelling()):
                            return _aborted(rid, tries, f"{call.abandoned}: the request's connection was closed")
                        if not call.abandoned:
                            # The caller gave up on this turn; do not leave it generating on the server.
                            await asyncio.shield(self._abort_quietly(rid))
                        raise
                    except _Retryable as exc:
                        call.rid = None
                        if exc.dropped:
                            # The server may still be generating it: a retry is a new rid, never this one.
                            await self._abort_quietly(rid)
                        raise
                    finally:
                        call.rid = None
                        call.post = None
        except _Retryable as last:
            detail = f"POST {url} failed {loop.schedule.retries + 1} times; last error: {last}"
            if last.timeout:
                raise ModelTimeoutError(detail) from None
            if last.protocol:
                raise ModelProtocolError(detail) from None
            raise ModelUnavailableError(detail) from None
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _backoff(self, call: _Call, delay: float) -> None:
        """Sleep before a retry; an abort ends the wait at once."""
        sleeper = asyncio.ensure_future(self._sleep(delay))
        waker = asyncio.ensure_future(call.wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()

    async def _post_generate(self, body: bytes, timeout: float | None) -> wire.GenerateResponse:
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
            message = _error_message(response)
            if status == 400 and wire.is_context_refusal(message):
                raise ContextBudgetError(f"the server refused the request: {message}")
            raise ModelProtocolError(f"{url} rejected the request with HTTP {status}: {message}")
        try:
            return wire.GenerateResponse.model_validate_json(response.content)
        except ValidationError as exc:
            raise ModelProtocolError(
                f"{url} answered HTTP {status} with a body that is not an SGLang /generate response: {exc}"
            ) from exc

    async def engines(self) -> fleets.Fleet:
        """What serves the endpoint: one engine, or a gateway's engines. Read once for an engine
        or an RL gateway (which fans out itself); at every call for a plain gateway, whose
        worker list changes."""
        if self._fleet is None or not self._fleet.listed_once:
            self._fleet = await fleets.discover(
                self._http, self.base_url, headers=self._admin_headers, timeout=self.abort_timeout
            )
        return self._fleet

    async def abort(self, rid: str) -> None:
        """Ask the server to abort the request whose rid is exactly ``rid``: every engine behind
        the endpoint, since a gateway does not say which one holds it (the others ignore it)."""
        url = f"{self.base_url}/abort_request"
        body = wire.AbortRequest(rid=rid, abort_all=False).model_dump()
        try:
            fleet = await self.engines()
        except fleets.FleetError as exc:
            raise ModelUnavailableError(f"cannot reach {url} to abort rid {rid!r}: {exc}") from exc
        answers = await fleets.call_engines(
            self._http,
            fleet,
            "POST",
            "/abort_request",
            body,
            headers=self._admin_headers,
            timeout=self.abort_timeout,
        )
        refused = [a for a in answers if a.status in (401, 403)]
        if refused:
            raise AbortRefused(
                f"{refused[0].engine}/abort_request refused to abort rid {rid!r} (HTTP {refused[0].status}): the "
                "server needs its admin key; set spec.inference.adminKeySecretRef to the Secret holding SGLang's "
                "--admin-api-key (behind smg, the key smg was given as --api-key)"
            )
        if any(a.ok for a in answers):
            return
        failed = "; ".join(f"{a.engine}: {a.error or a.status}" for a in answers)
        if all(a.status is None for a in answers):
            raise ModelUnavailableError(f"cannot reach {url} to abort rid {rid!r}: {failed}")
        raise ModelProtocolError(f"{url} did not take the abort of rid {rid!r}: {failed}")

    async def abort_in_flight(self) -> int:
        """Abort every generate() of this client: the rid on the server now (by its exact
        name), and a call waiting to retry (it returns an abort without sending again).

        Returns how many rids were sent an abort; raises when an abort could not be
        delivered (the caller retries those: a real failure).

        While the server is paused (``GET /ready`` answers 503) no rid is sent: SGLang
        0.5.23 holds a request that arrives during a pause at its tokenizer's gate, where
        the scheduler has not seen it, so an exact-rid abort is lost, and the rid is then
        marked ``abort_sent``, which drops every later abort of it (the client's retries
        and SGLang's own abort of a disconnected request). The request's connection is
        closed instead: the call returns an abort at once, and after /continue_generation
        SGLang aborts the disconnected request itself (docs/sglang-protocol.md)."""
        calls = list(self._calls)
        for call in calls:
            call.aborted = True
            call.wake.set()
        live = [c for c in calls if c.rid is not None]
        if live and await self.paused():
            for call in live:
                call.abandoned = "aborted while the server was paused"
                if call.post is not None:
                    call.post.cancel()
            return 0
        sent = 0
        for call in live:
            if call.rid is None:
                continue
            try:
                await self.abort(call.rid)
            except AbortRefused as exc:
                # No key for the admin route: close the request's connection instead; the
                # server aborts a request whose client is gone (SGLang does at its next poll).
                log.warning("%s; closing the request's connection instead", exc)
                call.abandoned = "the server refused the abort (no admin key)"
                if call.post is not None:
                    call.post.cancel()
                continue
            sent += 1
        return sent

    async def paused(self) -> bool:
        """True when the server says it is paused (``GET /ready`` answers 503; behind a gateway,
        any of its engines); False when it is ready, has no such route (before SGLang 0.5.23)
        or cannot be reached."""
        try:
            fleet = await self.engines()
        except fleets.FleetError:
            return False
        answers = await fleets.call_engines(
            self._http, fleet, "GET", "/ready", headers=self._admin_headers, timeout=self.abort_timeout
        )
        return any(a.status == 503 for a in answers)

    async def _abort_quietly(self, rid: str) -> None:
        try:
            await self.abort(rid)
        except (ModelUnavailableError, ModelProtocolError):
            # Best effort: the server may be down; a retry still uses a new rid.
            pass

    async def health(self) -> bool:
        """True when GET /health answers 2xx."""
        try:
            response = await self._http.get("/health", timeout=min(self.timeout, 10.0))
        except httpx.TransportError:
            return False
        return response.is_success

    async def limits(self) -> ContextLimits | None:
        """The server's token limits from /get_server_info (and /get_model_info), None when
        neither says (an older server, or a proxy that hides them)."""
        server = await self._info("/get_server_info", "/server_info", model=wire.ServerInfo)
        model = await self._info("/get_model_info", "/model_info", model=wire.ModelInfo)
        return ContextLimits.from_info(
            server if isinstance(server, wire.ServerInfo) else None,
            model if isinstance(model, wire.ModelInfo) else None,
        )

    async def server_info(self) -> wire.ServerInfo | None:
        info = await self._info("/get_server_info", "/server_info", model=wire.ServerInfo)
        return info if isinstance(info, wire.ServerInfo) else None

    async def _info(self, *paths: str, model: type[wire.ServerInfo] | type[wire.ModelInfo]) -> Any:
        for path in paths:
            try:
                response = await self._http.get(path, timeout=min(self.timeout, 30.0))
            except httpx.TransportError as exc:
                log.warning("cannot read %s%s: %r", self.base_url, path, exc)
                return None
            if response.status_code == 404:
                continue
            if not response.is_success:
                log.warning("%s%s answered HTTP %d", self.base_url, path, response.status_code)
                return None
            try:
                return model.model_validate_json(response.content)
            except ValidationError as exc:
                log.warning("%s%s is not SGLang's shape: %s", self.base_url, path, exc)
                return None
        return None


def encode_request(request: GenerateRequest, ids_json: str | None) -> bytes:
    body = request.to_wire()
    if ids_json is None:
        return _dumps(body)
    # Splice the pre-encoded ids in, so a 32k-token context is not re-encoded every turn.
    body.pop("input_ids", None)
    return b'{"input_ids":[' + ids_json.encode() + b"]," + _dumps(body)[1:]


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _aborted(rid: str, attempt: int, message: str) -> GenerateResult:
    return GenerateResult(
        rid=rid,
        output_ids=[],
        logprobs=[],
        text="",
        finish="abort",
        weight_version=None,
        prompt_tokens=0,
        attempts=attempt,
        abort_message=message,
    )


def server_version(value: str | None) -> str | None:
    """The server's version label, None when unset (SGLang reports ``"default"`` until a trainer sets one)."""
    return None if value in (None, "", wire.UNSET_WEIGHT_VERSION) else value


def token_versions(meta: wire.MetaInfo, count: int) -> list[str | None]:
    """One version per output token: from the spans when the weights changed during the
    request, else the response's single version. Tokens no span covers get the last one."""
    last = server_version(meta.weight_version)
    versions: list[str | None] = [last] * count
    for span in meta.weight_versions or []:
        label = server_version(span.version)
        for i in range(max(0, span.start), min(span.end, count)):
            versions[i] = label
    return versions


def _to_result(rid: str, body: wire.GenerateResponse, attempt: int) -> GenerateResult:
    meta = body.meta_info
    if meta.finish_reason is None:
        raise ModelProtocolError(f"/generate answered without meta_info.finish_reason (rid {rid})")
    finish = meta.finish_reason.type
    logprobs: list[float] = []
    for position, entry in enumerate(meta.output_token_logprobs or []):
        if entry[0] is None:
            # SGLang writes a non-finite logprob as null; 0.0 would claim probability 1.
            raise _Retryable(
                f"/generate returned a null (non-finite) logprob for output token {position} "
                f"(id {entry[1]}, rid {rid})",
                protocol=True,
            )
        logprobs.append(float(entry[0]))
    if finish != "abort" and len(logprobs) != len(body.output_ids):
        raise ModelProtocolError(
            f"/generate returned {len(body.output_ids)} output_ids but {len(logprobs)} logprobs "
            f"(rid {rid}); the runner needs return_logprob to cover every sampled token"
        )
    routed: bytes | None = None
    if meta.routed_experts is not None:
        try:
            routed = wire.decode_routed_experts(meta.routed_experts)
        except ValueError as exc:
            raise ModelProtocolError(f"/generate returned unreadable routed_experts (rid {rid}): {exc}") from exc
    return GenerateResult(
        rid=rid,
        output_ids=list(body.output_ids),
        logprobs=logprobs,
        text=body.text,
        finish=finish,
        weight_version=server_version(meta.weight_version),
        prompt_tokens=meta.prompt_tokens,
        token_versions=token_versions(meta, len(body.output_ids)),
        routed_experts=routed,
        attempts=attempt,
        abort_message=meta.finish_reason.message if finish == "abort" else None,
        cached_tokens=meta.cached_tokens,
    )


def _error_message(response: httpx.Response) -> str:
    """SGLang's error text: ``{"error": {"message": ...}}``, ``{"error": "..."}`` or plain text."""
    try:
        body = response.json()
    except ValueError:
        return _snippet(response)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body["detail"])
    return _snippet(response)


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
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def new_run_uid() -> str:
    """A random run id for callers without one (tests, benchmarks)."""
    return secrets.token_hex(6)
