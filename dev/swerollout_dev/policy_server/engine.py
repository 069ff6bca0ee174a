"""The request lifecycle: in-flight table, token loop, stop rules, aborts, pauses, weight version.

Policies only produce tokens; everything an SGLang scheduler decides around them
lives here, checked at every token boundary so that an abort or a pause lands
between two tokens:

- /abort_request matches the EXACT rid, as SGLang 0.5.23's HTTP layer does (its
  TokenizerManager drops any other rid; only its scheduler matches prefixes); an
  aborted request returns finish_reason abort with the tokens generated so far
  (none if it was still waiting: "abort before prefill").
- pause ``abort``: every in-flight request is aborted; new ones wait for continue.
- pause ``retract``: in-flight requests stop and, after continue, carry on from
  their partial output (SGLang re-prefills prompt + partial output), so one
  response can hold tokens of two weight versions.
- pause ``in_place``: in-flight requests freeze and carry on after continue. The
  scheduler runs no loop meanwhile, so an abort lands only after continue.
- in every mode, a request that arrives during the pause waits at the gate before the
  scheduler: no abort reaches it (an exact-rid one is lost, and marks the rid so that
  later ones are ignored), it runs after continue; ``GET /ready`` answers 503 meanwhile.
- ``meta_info.weight_version`` is the server's version when the response is
  built; a version change while a request has output is recorded, and the
  response then carries ``weight_versions`` spans, as SGLang 0.5.23 does.
- Limits: a prompt of ``len >= min(ctx - 1, kv - 1) - 5`` is refused with SGLang's
  400 text, ``prompt + max_new_tokens > ctx`` too, and ``max_new_tokens`` is capped
  at ``max_req_len - prompt - 1``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from swerollout.issue_images import image_placeholder
from swerollout.wire.sglang import (
    ContextLimits,
    FinishReason,
    GenerateRequest,
    GenerateResponse,
    MetaInfo,
    PauseMode,
    WeightVersionSpan,
    encode_routed_experts,
    finite_or_none,
)
from swerollout_dev.policy_server.errors import BadRequestError
from swerollout_dev.policy_server.faults import FaultInjector
from swerollout_dev.policy_server.images import ImageRecord, expand, read_image
from swerollout_dev.policy_server.policies import (
    Generation,
    Policy,
    PrefixCaching,
    ReusesPrefix,
    SamplingConfig,
    TokenSample,
)
from swerollout_dev.policy_server.wire import RequestRecord

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from swerollout_dev.policy_server.chat_format import ChatFormat

ProgressCallback = Callable[[GenerateResponse], Awaitable[None]]
log = logging.getLogger("swerollout_dev.policy_server")

# Synthetic routed-experts shape (this server has no MoE layers): per token read,
# ROUTED_LAYERS x ROUTED_TOP_K int32 expert ids, derived from the token id, in SGLang's
# layout [seqlen - 1 - routed_experts_start_len, layers, top_k] over prompt + output.
ROUTED_LAYERS = 2
ROUTED_TOP_K = 2
ROUTED_EXPERTS = 8
PAUSE_SETTLE_TIMEOUT = 60.0
REQUEST_LOG_SIZE = 256
"""Admitted requests GET /_standin/requests remembers (the oldest are forgotten first)."""


@dataclass
class _InFlight:
    rid: str
    prompt_tokens: int
    abort_message: str | None = None
    started: bool = False
    """Past the pause gate (its generation has begun)."""
    abort_sent: bool = False
    """An exact-rid abort reached its state: SGLang ignores every later one (ReqState.abort_sent)."""
    parked: bool = False
    """Frozen at a token boundary by a pause."""
    generated: int = 0
    received_at: float = field(default_factory=time.monotonic)
    input_ids: list[int] = field(default_factory=list)
    version_changes: list[tuple[str, int]] = field(default_factory=list)
    """(old version, output tokens so far) at each weight-version change with output."""
    cached_tokens: int = 0
    """Input tokens the policy took from its prefix cache (known after the first step)."""


@dataclass(frozen=True)
class Admitted:
    """A request that passed validation and holds its rid in the in-flight table."""

    entry: _InFlight
    request: GenerateRequest
    input_ids: list[int]


class Engine:
    def __init__(
        self,
        *,
        policy: Policy,
        tokenizer: PreTrainedTokenizerBase,
        chat_format: ChatFormat,
        faults: FaultInjector,
        weight_version: str,
        context_length: int,
        seed: int,
    ) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.chat_format = chat_format
        self.faults = faults
        self.weight_version = weight_version
        self.context_length = context_length
        self._vocab_size = len(tokenizer)
        self._seeds = random.Random(seed)
        self._requests: dict[str, _InFlight] = {}
        self._pause_mode: PauseMode | None = None
        self._changed = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-step")
        self.requests_served = 0
        self.aborted_requests = 0
        """Requests an abort reached (by rid, abort_all, a pause or a version update): how a
        fleet's test or bench sees which engine an abort landed on."""
        placeholder = image_placeholder(tokenizer)
        self.image_pad_id = placeholder.pad_id if placeholder is not None else None
        """The token images expand into; None: a text-only model, which ignores image_data as SGLang does."""
        self.request_log: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_SIZE)

    # --- state changes wake every waiter; waiters re-check their condition -------------

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_for(self, condition: Callable[[], bool], timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not condition():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return condition()
        return True

    @property
    def paused(self) -> PauseMode | None:
        return self._pause_mode

    # --- control endpoints ------------------------------------------------------------

    def abort(self, rid: str, *, abort_all: bool, message: str = "Abort requested") -> int:
        """Abort the request whose rid is exactly ``rid`` (or all); returns how many.

        As SGLang 0.5.23: a request held at the pause gate is not in the scheduler yet,
        so no abort reaches it (it runs after continue), and an exact-rid abort marks the
        rid so that every later abort of it is ignored (docs/sglang-protocol.md)."""
        if not abort_all and not rid:
            return 0
        hits: list[_InFlight] = []
        for entry in self._requests.values():
            if not abort_all:
                if entry.rid != rid or entry.abort_sent:
                    continue
                entry.abort_sent = True
            if self._pause_mode is not None and not entry.started:
                continue  # held at the pause gate: the scheduler has not seen it
            hits.append(entry)
        log.info("abort rid=%r all=%s matched=%d", rid, abort_all, len(hits))
        for entry in hits:
            if entry.abort_message is None:
                entry.abort_message = message
                self.aborted_requests += 1
        self._signal()
        return len(hits)

    async def pause(self, mode: PauseMode) -> None:
        """Pause generation; returns once no in-flight request is mid-token."""
        log.info("pause mode=%s in_flight=%d", mode, len(self._requests))
        self._pause_mode = mode
        if mode == "abort":
            self.abort("", abort_all=True, message="Abort by pause_generation")
        self._signal()
        await self._wait_for(
            lambda: (
                self._pause_mode is not mode  # continued (or re-paused) meanwhile
                or (
                    all(not e.started or e.parked or e.abort_message for e in self._requests.values())
                    and (mode != "abort" or not any(e.started for e in self._requests.values()))
                )
            ),
            timeout=PAUSE_SETTLE_TIMEOUT,
        )

    def resume(self) -> None:
        log.info("continue generation")
        self._pause_mode = None
        self._signal()

    def update_weight_version(self, new_version: str, *, abort_all: bool) -> None:
        if abort_all:
            self.abort("", abort_all=True, message="Abort by update_weight_version")
        log.info("weight version %s -> %s", self.weight_version, new_version)
        if new_version != self.weight_version:
            for entry in self._requests.values():
                if entry.generated and entry.abort_message is None:
                    entry.version_changes.append((self.weight_version, entry.generated))
        self.weight_version = new_version

    def flush_cache(self) -> None:
        """Empty the policy's prefix cache, if it keeps one (SGLang's /flush_cache)."""
        if isinstance(self.policy, PrefixCaching):
            self.policy.flush_cache()
            log.info("prefix cache flushed")

    def load(self) -> dict[str, int]:
        running = [e for e in self._requests.values() if e.started and not e.parked]
        waiting = [e for e in self._requests.values() if not e.started or e.parked]
        return {
            "num_running_reqs": len(running),
            "num_waiting_reqs": len(waiting),
            "num_total_reqs": len(self._requests),
            # A paused request keeps its KV (in_place) or gets it back on continue (retract).
            "num_used_tokens": sum(e.prompt_tokens + e.generated for e in self._requests.values() if e.started),
        }

    def close(self) -> None:
        self._pause_mode = None  # so the abort reaches requests held at the pause gate too
        self.abort("", abort_all=True, message="Server shutting down")
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- generation ---------------------------------------------------------------------

    def read_images(self, request: GenerateRequest) -> list[ImageRecord]:
        try:
            urls = request.images()
        except ValueError as exc:
            raise BadRequestError(str(exc), field="image_data") from None
        images = [read_image(index, url) for index, url in enumerate(urls)]
        if self.image_pad_id is None:
            return [image.model_copy(update={"tokens": 0}) for image in images]
        return images

    def prompt_ids(self, request: GenerateRequest, images: list[ImageRecord] | None = None) -> list[int]:
        """The prompt the model reads: image placeholders expanded, then SGLang's length checks."""
        if request.input_ids is not None:
            ids = request.input_ids
            if not ids:
                raise BadRequestError("input_ids must not be empty", field="input_ids")
            bad = next((i for i in ids if not 0 <= i < self._vocab_size), None)
            if bad is not None:
                raise BadRequestError(
                    f"input_ids: token id {bad} is outside the vocabulary [0, {self._vocab_size})",
                    field="input_ids",
                )
        else:
            ids = list(self.tokenizer.encode(request.text or "", add_special_tokens=False))
        if images and self.image_pad_id is not None:
            sent = len(ids)
            ids = expand(ids, self.image_pad_id, images)
            if not self.limits.prompt_fits(len(ids)):
                raise BadRequestError(
                    "Multimodal prompt is too long after expanding multimodal tokens. After expanding "
                    f"len(req.origin_input_ids_unpadded)={sent} => {len(ids)} >= {self.limits.max_req_input_len}.",
                    field="image_data",
                )
        # SGLang's texts, so a client can tell a too-long prompt from other 400s.
        if len(ids) >= self.context_length:
            raise BadRequestError(
                f"The input ({len(ids)} tokens) is longer than the model's context length "
                f"({self.context_length} tokens).",
                field="input_ids",
            )
        max_new = request.sampling_params.max_new_tokens
        if max_new is not None and len(ids) + max_new > self.context_length:
            raise BadRequestError(
                f"Requested token count exceeds the model's maximum context length of {self.context_length} "
                f"tokens. You requested a total of {len(ids) + max_new} tokens: {len(ids)} tokens from the input "
                f"messages and {max_new} tokens for the completion. Please reduce the number of tokens in the "
                "input messages or the completion to fit within the limit.",
                field="sampling_params.max_new_tokens",
            )
        if not self.limits.prompt_fits(len(ids)):
            raise BadRequestError(
                f"Input length ({len(ids)} tokens) exceeds the maximum allowed length "
                f"({self.limits.max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.",
                field="input_ids",
            )
        return ids

    @property
    def limits(self) -> ContextLimits:
        return ContextLimits.of(self.context_length)

    def admit(self, request: GenerateRequest, route: Literal["generate", "chat"] = "generate") -> Admitted:
        """Roll the fault dice, validate the prompt and register the rid (before any output)."""
        self.faults.before_request()
        images = self.read_images(request)
        input_ids = self.prompt_ids(request, images)
        rid = request.rid or uuid.uuid4().hex
        if rid in self._requests:
            raise BadRequestError(f"rid: request {rid!r} is already in flight", field="rid")
        self.request_log.append(
            RequestRecord(
                rid=rid,
                route=route,
                sent_tokens=len(request.input_ids) if request.input_ids is not None else len(input_ids),
                prompt_tokens=len(input_ids),
                images=images,
            )
        )
        entry = _InFlight(rid=rid, prompt_tokens=len(input_ids), input_ids=input_ids)
        self._requests[rid] = entry
        self._signal()
        return Admitted(entry=entry, request=request, input_ids=input_ids)

    def release(self, admitted: Admitted) -> None:
        if self._requests.get(admitted.entry.rid) is admitted.entry:
            del self._requests[admitted.entry.rid]
            self.requests_served += 1
            self._signal()

    async def run(self, admitted: Admitted, on_progress: ProgressCallback | None = None) -> GenerateResponse:
        """Generate an admitted request to its end; it leaves the in-flight table in every case."""
        try:
            result = await self._run(admitted.entry, admitted.request, admitted.input_ids, on_progress)
        finally:
            self.release(admitted)
        finish = result.meta_info.finish_reason
        log.info(
            "rid=%s prompt=%d completion=%d finish=%s version=%s",
            result.meta_info.id,
            result.meta_info.prompt_tokens,
            result.meta_info.completion_tokens,
            finish.type if finish else None,
            result.meta_info.weight_version,
        )
        return result

    async def generate(
        self,
        request: GenerateRequest,
        on_progress: ProgressCallback | None = None,
        *,
        route: Literal["generate", "chat"] = "generate",
    ) -> GenerateResponse:
        return await self.run(self.admit(request, route), on_progress)

    async def _run(
        self,
        entry: _InFlight,
        request: GenerateRequest,
        input_ids: list[int],
        on_progress: ProgressCallback | None,
    ) -> GenerateResponse:
        params = request.sampling_params
        seed = params.sampling_seed if params.sampling_seed is not None else self._seeds.getrandbits(63)
        sampling = SamplingConfig(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, seed=seed)
        stop_ids = set(params.stop_token_ids or [])
        if not params.ignore_eos:
            stop_ids |= self.chat_format.stop_ids
            if self.tokenizer.eos_token_id is not None:
                stop_ids.add(int(self.tokenizer.eos_token_id))
        stop_strings = params.stop_strings()

        # Held while paused (new requests wait for continue; no abort reaches them there).
        await self._wait_for(lambda: self._pause_mode is None)
        max_new = min(
            params.max_new_tokens if params.max_new_tokens is not None else 1 << 30,
            self.limits.max_req_len - len(input_ids) - 1,
        )
        output: list[int] = []
        logprobs: list[float] = []
        if entry.abort_message is not None:
            return self._response(entry, request, output, logprobs, _abort(entry.abort_message), None)
        entry.started = True
        self._signal()
        finish: FinishReason | None = None
        matched_text: str | None = None
        generation: Generation = self.policy.start(input_ids, sampling)
        while finish is None:
            fault_limit = self.faults.settings.abort_after_tokens
            if entry.abort_message is not None:
                finish = _abort(entry.abort_message)
            elif self._pause_mode is not None:
                await self._park(entry)
            elif len(output) >= max_new:
                finish = FinishReason(type="length", length=len(output))
            elif fault_limit is not None and len(output) >= fault_limit:
                finish = _abort(f"injected fault: abort after {fault_limit} tokens")
            else:
                aborted, sample = await self._step_unless_aborted(entry, generation)
                if aborted:
                    continue  # the loop's first check ends it
                if sample is None:
                    finish = FinishReason(type="stop", matched=None)
                    break
                output.append(sample.token_id)
                logprobs.append(sample.logprob)
                entry.generated = len(output)
                if isinstance(generation, ReusesPrefix):
                    entry.cached_tokens = generation.reused_tokens
                if sample.token_id in stop_ids:
                    finish = FinishReason(type="stop", matched=sample.token_id)
                elif stop_strings and self._tail_has_stop(output, stop_strings, params.skip_special_tokens):
                    matched_text = _first_stop(self._decode(output, params.skip_special_tokens), stop_strings)
                    if matched_text is not None:
                        finish = FinishReason(type="stop", matched=matched_text)
                delay = self.faults.settings.delay_per_token
                await asyncio.sleep(delay)  # also yields, so aborts and pauses get in
                if on_progress is not None and finish is None:
                    await on_progress(self._response(entry, request, output, logprobs, None, None))
        return self._response(entry, request, output, logprobs, finish, matched_text)

    async def _park(self, entry: _InFlight) -> None:
        """Wait out a pause at a token boundary, then carry on (retract keeps the partial
        output too). During ``in_place`` the scheduler is frozen: even an abort waits for continue."""
        entry.parked = True
        self._signal()
        try:
            await self._wait_for(
                lambda: self._pause_mode is None or (entry.abort_message is not None and self._pause_mode != "in_place")
            )
        finally:
            entry.parked = False
            self._signal()

    async def probe(self) -> None:
        """One greedy decode step outside the request table (health_generate; not counted as load)."""
        sampling = SamplingConfig(temperature=0.0, top_p=1.0, top_k=-1, seed=0)
        await self._step(self.policy.start([self.chat_format.end_of_turn_id], sampling))

    async def _step_unless_aborted(self, entry: _InFlight, generation: Generation) -> tuple[bool, TokenSample | None]:
        """One decode step, or (True, None) as soon as an abort lands. Steps of concurrent
        requests queue on one worker thread (SGLang batches them into one forward pass), so
        an aborted request must not wait for the queue: its pending step is cancelled."""
        if not self.policy.offload:
            return False, await self._step(generation)
        step = asyncio.ensure_future(self._step(generation))
        aborted = asyncio.ensure_future(
            self._wait_for(lambda: entry.abort_message is not None and self._pause_mode != "in_place")
        )
        try:
            await asyncio.wait({step, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
        if step.done():
            return False, step.result()
        step.cancel()  # a queued step never runs; a running one finishes and is discarded
        return True, None

    async def _step(self, generation: Generation) -> TokenSample | None:
        if self.policy.offload:
            return await asyncio.get_running_loop().run_in_executor(self._executor, generation.next_token)
        return generation.next_token()

    def _tail_has_stop(self, output: list[int], stops: list[str], skip_special_tokens: bool) -> bool:
        # Only the newest tokens can complete a stop string; decoding the whole output
        # at every step would make long generations quadratic. A non-special token
        # decodes to at least one character (a partial UTF-8 byte shows as U+FFFD), so
        # the last len(stop) + a few tokens hold any match ending at the newest token
        # (unless skipped special tokens sit inside the match, which we accept).
        window = max(len(stop) for stop in stops) + 4
        tail = self._decode(output[-window:], skip_special_tokens)
        return any(stop in tail for stop in stops)

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def _response(
        self,
        entry: _InFlight,
        request: GenerateRequest,
        output: list[int],
        logprobs: list[float],
        finish: FinishReason | None,
        matched_text: str | None,
    ) -> GenerateResponse:
        text = self._decode(output, request.sampling_params.skip_special_tokens)
        if matched_text is not None:
            text = text[: text.find(matched_text)]
        token_logprobs: list[tuple[float | None, int, str | None]] | None = None
        if request.return_logprob:
            token_logprobs = [
                (finite_or_none(lp), tok, self._decode([tok], False) if request.return_text_in_logprobs else None)
                for lp, tok in zip(logprobs, output, strict=True)
            ]
        meta = MetaInfo(
            id=entry.rid,
            prompt_tokens=entry.prompt_tokens,
            completion_tokens=len(output),
            cached_tokens=entry.cached_tokens,
            weight_version=self.weight_version,
            weight_versions=_spans(entry.version_changes, self.weight_version, len(output)),
            finish_reason=finish,
            output_token_logprobs=token_logprobs,
            routed_experts=(
                _synthetic_routed_experts([*entry.input_ids, *output], request.routed_experts_start_len)
                if request.return_routed_experts
                else None
            ),
            e2e_latency=time.monotonic() - entry.received_at,
        )
        return GenerateResponse(text=text, output_ids=list(output), meta_info=meta)


def _abort(message: str) -> FinishReason:
    return FinishReason(type="abort", message=message)


def _spans(changes: list[tuple[str, int]], current: str, count: int) -> list[WeightVersionSpan] | None:
    """Which weights sampled which output tokens, when they changed during the request
    (SGLang: a span per version, merged when a version repeats; cut at ``count``)."""
    if not changes:
        return None
    spans: list[WeightVersionSpan] = []
    for version, end in [*changes, (current, count)]:
        end = min(end, count)
        if spans and end <= spans[-1].end:
            continue
        if spans and spans[-1].version == version:
            spans[-1].end = end
            continue
        spans.append(WeightVersionSpan(version=version, start=spans[-1].end if spans else 0, end=end))
    return spans


def _first_stop(text: str, stops: list[str]) -> str | None:
    found = [(text.find(s), s) for s in stops if s in text]
    return min(found)[1] if found else None


def _synthetic_routed_experts(sequence: list[int], start: int) -> str:
    """Base64 int32 ``[len(sequence) - 1 - start, ROUTED_LAYERS, ROUTED_TOP_K]``: one row per
    token the model read from position ``start`` on (the last sampled token is never read)."""
    rows = [
        [(token + layer * 3 + k) % ROUTED_EXPERTS for layer in range(ROUTED_LAYERS) for k in range(ROUTED_TOP_K)]
        for token in sequence[start : len(sequence) - 1]
    ]
    return encode_routed_experts(rows)
