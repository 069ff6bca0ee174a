"""RLTokenModel: the policy behind agent_runner.policy.model.Model, with exact token bookkeeping.

Each ``generate()`` sends the whole token list to SGLang's /generate and appends
exactly the returned ``output_ids`` (loss_mask 1, their logprobs, the server's
weight version). Environment messages become chat-template deltas (loss_mask 0,
see chat_template.py) right before the next request, so several ``add_messages``
calls between two turns render as one step, as the template would render them.

Budgets: ``max_new_tokens`` of a request is the smallest of the caller's value, the
sampling default, the room left in ``max_context_tokens``, the room the server's own
limits leave (``server_limits``: SGLang refuses a prompt of ``len >= max_req_input_len``
and caps output at ``max_req_len - len - 1``) and, when set, what is left of
``max_sampled_tokens`` (spec.inference.maxSampledTokens: counted across aborts and
resumes, dropped tokens included, so a resumed run never gets a fresh budget). A full
context or a spent sampled-token budget raises ContextBudgetError (``exit_context``),
the latter naming the field; the trajectory's info reports ``sampled_total``,
``kept_tokens`` and ``dropped_total``.

Weight versions: per token, from the response's ``weight_versions`` spans when the
weights changed during the request. A server version of ``"default"`` (or none)
means unset: the spec's ``weight_version`` labels those tokens, and
``state.version_sources`` records for each label whether it came from the server
or the spec.

Routed experts (MoE routing replay): each request asks only for the rows it adds
(``routed_experts_start_len`` = rows stored so far), so the stored rows are one per
token the model read. The trajectory's ``routed_experts`` has one row per token: those
rows, then zero filler from ``routed_experts_forwarded`` on (the final sampled token,
never read back, and any delta appended after the last request); Trajectory's module
doc is the one statement of that alignment. Rows of an aborted (dropped) request are
dropped with its tokens. A server that returns none although asked gets a note.

Abort policy (spec.inference.onAbort):

- DROP (the default). When the server aborts a request (weight update, suspend), the
  tokens it generated in that request are discarded and counted in ``dropped_total``
  and the token budget; the token list still ends with the generation prompt, so the
  resumed ``generate()`` re-samples that turn from its start with the new weights.
  Every kept turn is therefore sampled by one weight version end to end, and no
  token without a logprob (SGLang may send fewer logprobs on abort) ever enters the
  buffer. The aborted ModelTurn reports ``new_tokens=0`` and the partial text.
- KEEP (partial rollout, as slime and AReaL do). The aborted request's tokens that
  carry a logprob stay in the list (loss mask 1, their logprobs, each with the version
  that sampled it); the rest are dropped and counted. The turn is still owed: the next
  ``generate()`` sends the list as it is (ending in the kept tokens) and continues the
  same assistant turn, whose per-turn token cap counts the kept tokens. The turn's text
  and tool calls are parsed from all of its tokens once it finishes. A turn sampled by
  more than one version is listed in the trajectory's ``info.mixed_version_turns``.

Snapshots (`Snapshot`, for abort -> resume on the same pod and for the per-turn
checkpoints): a snapshot holds everything RLTokenModel needs to continue exactly where it stopped
(messages, the token buffer, rid counter, budgets used, per-turn records) plus the
agent loop's own state dict, which it hands in and gets back untouched. It is
encoded with swerollout.wire.codec (kind "snapshot"): the JSON parts go in the
header, the token arrays are packed (int32 ids, uint8 mask, float32 logprobs,
uint16 weight-version indices), zlib-compressed and sha256-checked.

Restoring a blob of a newer snapshot schema, of another kind, or a corrupted blob
raises agent_runner.policy.errors.SnapshotError with the reason.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_runner.policy.chat_template import ChatTemplate
from agent_runner.policy.errors import ChatTemplateError, ContextBudgetError, ModelError, SnapshotError
from agent_runner.policy.images import image_urls
from agent_runner.policy.model import FinishReason, ModelTurn, ToolCall
from agent_runner.policy.sglang import ContextLimits, GenerateResult, SamplingParams, SGLangClient, make_rid
from agent_runner.policy.text import clean_value
from agent_runner.policy.tokens import TokenBuffer
from agent_runner.policy.tool_calls import ToolCallParser, detect_parser, escape_markup
from swerollout.issue_images import image_placeholder, text_only_message
from swerollout.wire.codec import CodecError, decode, encode
from swerollout.wire.trajectory import Trajectory

if TYPE_CHECKING:
    from swerollout.runner_tokenizer import AnyTokenizer

# -- the snapshot ------------------------------------------------------------------------

SNAPSHOT_KIND = "snapshot"
SNAPSHOT_SCHEMA = 1


class TurnRecord(BaseModel):
    """One /generate call of the conversation, accepted or aborted."""

    model_config = ConfigDict(extra="forbid")

    rid: str
    finish: str
    sampled: int
    """Tokens the server returned for this request."""
    kept: bool
    """True when this request's tokens are in the list: all of an answered one, or under
    onAbort Keep the logprob-carrying prefix of an aborted one; False when dropped."""
    kept_tokens: int = 0
    """How many of its tokens are in the list (``sampled`` minus what was dropped)."""
    weight_version: str | None = None
    attempts: int = 1


class ModelState(BaseModel):
    """The JSON part of RLTokenModel's state (token arrays travel separately)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(default_factory=list)
    pending: list[dict[str, Any]] = Field(default_factory=list)
    """Messages added but not yet turned into tokens."""
    awaiting_generation: bool = False
    """The token list ends with a generation prompt (set up for a request not yet answered)."""
    last_sampled_id: int | None = None
    partial_tokens: int = 0
    """Sampled tokens of the owed turn already in the list (kept from aborted requests
    under onAbort Keep); the next request continues the turn after them."""
    turn_counter: int = 0
    """Requests started (the turn number in rids); never reused after a resume."""
    sampled_total: int = 0
    """Tokens the server generated, dropped ones included (the token budget spent)."""
    dropped_total: int = 0
    replaced_code_points: int = 0
    """Unencodable code points of environment text replaced with U+FFFD (agent_runner.policy.text)."""
    turns: list[TurnRecord] = Field(default_factory=list)
    routed_experts: list[str] = Field(default_factory=list)
    """Base64 int32 routing rows of each kept turn, only the rows that turn added
    (requested with routed_experts_start_len), so their concatenation has one row
    per token read by the model."""
    routed_experts_rows: int = 0
    routed_experts_width: int | None = None
    """int32 values per row (layers x top_k)."""
    version_sources: dict[str, str] = Field(default_factory=dict)
    """Per weight-version label: "server" (reported by SGLang) or "spec" (the spec's
    weightVersion, used while the server reported none or "default")."""
    notes: list[str] = Field(default_factory=list)
    """Things the trainer must know about this run (limits lowered, data missing)."""
    expanded_image_tokens: int = 0
    """Tokens the server's multimodal processor expanded the image placeholders into, beyond
    the one placeholder token per image the list holds (its prompt_tokens minus the ids sent)."""


class Snapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    schema_version: int = SNAPSHOT_SCHEMA
    state: ModelState
    agent_state: dict[str, Any] = Field(default_factory=dict)
    buffer: TokenBuffer

    def to_bytes(self) -> bytes:
        buf = self.buffer
        meta = {
            "schema_version": self.schema_version,
            "state": self.state.model_dump(mode="json"),
            "agent_state": self.agent_state,
            "versions": buf.versions,
            "prompt_length": buf.prompt_length,
        }
        return encode(
            SNAPSHOT_KIND,
            meta,
            {
                "input_ids": buf.input_ids,
                "loss_mask": np.frombuffer(bytes(buf.loss_mask), dtype="|u1"),
                "logprobs": buf.logprobs,
                "version_index": buf.version_index,
            },
            dtypes={"input_ids": "<i4", "logprobs": "<f4", "version_index": "<u2"},
        )

    @classmethod
    def from_bytes(cls, blob: bytes) -> Snapshot:
        try:
            decoded = decode(blob, kind=SNAPSHOT_KIND)
        except CodecError as exc:
            raise SnapshotError(f"cannot restore snapshot: {exc}") from exc
        meta = decoded.meta
        schema = meta.get("schema_version")
        if not isinstance(schema, int) or schema > SNAPSHOT_SCHEMA:
            raise SnapshotError(
                f"snapshot schema v{schema} is not readable by this runner (reads up to v{SNAPSHOT_SCHEMA}); "
                "resume it with the runner version that wrote it"
            )
        try:
            arrays = decoded.arrays
            buffer = TokenBuffer(
                input_ids=arrays["input_ids"].tolist(),
                loss_mask=bytearray(arrays["loss_mask"].tobytes()),
                logprobs=arrays["logprobs"].astype(float).tolist(),
                version_index=arrays["version_index"].tolist(),
                versions=list(meta["versions"]),
                prompt_length=int(meta["prompt_length"]),
            )
            buffer.check()
            return cls(
                schema_version=schema,
                state=ModelState.model_validate(meta["state"]),
                agent_state=dict(meta.get("agent_state") or {}),
                buffer=buffer,
            )
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise SnapshotError(f"snapshot content is inconsistent: {exc}") from exc


# -- the model ---------------------------------------------------------------------------

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


class RLTokenModel:
    def __init__(
        self,
        tokenizer: AnyTokenizer,
        client: SGLangClient,
        *,
        sampling: SamplingParams,
        max_context_tokens: int,
        run_uid: str,
        tools: Sequence[dict[str, Any]] | None = None,
        weight_version: str | None = None,
        max_sampled_tokens: int | None = None,
        tool_call_format: str | None = "auto",
        template_kwargs: dict[str, Any] | None = None,
        return_routed_experts: bool = False,
        request_timeout: float | None = None,
        server_limits: ContextLimits | None = None,
        keep_aborted: bool = False,
    ) -> None:
        """``weight_version`` labels tokens when the server reports none (or "default").
        ``tool_call_format``: "auto" (from the chat template), a parser name, or None (text agents).
        ``server_limits``: the server's token limits (SGLangClient.limits()).
        ``keep_aborted``: onAbort Keep (see the module doc); False drops."""
        if max_context_tokens <= 0:
            raise ValueError(f"max_context_tokens must be positive, got {max_context_tokens}")
        self.tokenizer = tokenizer
        self.client = client
        self.sampling = sampling
        self.max_context_tokens = max_context_tokens
        self.max_sampled_tokens = max_sampled_tokens
        self.run_uid = run_uid
        self.weight_version = weight_version
        self.return_routed_experts = return_routed_experts
        self.request_timeout = request_timeout
        self.server_limits = server_limits
        self.keep_aborted = keep_aborted
        self.template = ChatTemplate(tokenizer, tools=tools, template_kwargs=template_kwargs)
        fmt = detect_parser(self.template.source) if tool_call_format == "auto" else tool_call_format
        self.parser = ToolCallParser(fmt, tools, reasoning_ends=self.template.reasoning_ends) if fmt else None
        if self.parser is not None:
            self.template.check_tool_turns()
        # Reasoning tags too: the parser splits at the last closing tag, which only a sampled tag may move.
        self._markup = [
            *(str(t.content) for t in tokenizer.added_tokens_decoder.values()),
            *self.template.reasoning_tags,
        ]
        self.buffer = TokenBuffer()
        self.state = ModelState()

    # --- the Model protocol ---------------------------------------------------------

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [*self.state.messages, *self.state.pending]

    @property
    def context_tokens(self) -> int:
        """Tokens the next request would send (pending messages not yet rendered excluded)."""
        return len(self.buffer)

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            if message.get("role") == "assistant":
                raise ModelError("add_messages takes environment messages; assistant turns come from generate()")
        for message in messages:
            # Where environment text enters the token list: unencodable code points become U+FFFD.
            cleaned, replaced = clean_value(dict(message))
            self.state.replaced_code_points += replaced
            self.state.pending.append(cleaned)

    def render_pending(self) -> None:
        """Tokenize the messages added since the last turn now rather than in the next
        generate (a prepared rollout builds its first prompt before the go)."""
        self._prepare_request()

    async def generate(self, *, max_new_tokens: int | None = None) -> ModelTurn:
        self._prepare_request()
        state = self.state
        images = image_urls(state.messages)
        sent = len(self.buffer)
        limit = self._token_limit(max_new_tokens)
        if limit is None:
            # Kept tokens of an aborted request already fill the turn's cap: it ends as cut off.
            return self._finish_turn(None)
        state.turn_counter += 1
        turn = state.turn_counter
        result = await self.client.generate(
            self.buffer.input_ids,
            self.sampling.model_copy(update={"max_new_tokens": limit}),
            rid_for_attempt=lambda attempt: make_rid(self.run_uid, turn, attempt),
            return_routed_experts=self.return_routed_experts,
            routed_experts_start_len=state.routed_experts_rows,
            timeout=self.request_timeout,
            input_ids_json=self.buffer.ids_json(),
            image_data=images or None,
        )
        if images and result.prompt_tokens > sent:
            state.expanded_image_tokens = result.prompt_tokens - sent
        state.sampled_total += len(result.output_ids)
        version = self._label(result.weight_version)
        if result.finish == "abort":
            # Keep: the tokens that carry a logprob (SGLang may send fewer on abort) stay.
            keep = min(len(result.output_ids), len(result.logprobs)) if self.keep_aborted else 0
            state.dropped_total += len(result.output_ids) - keep
            if keep:
                self._append_sampled(result, keep)
                state.partial_tokens += keep
                if self.return_routed_experts:
                    self._store_routed_experts(result, aborted=True)
            state.turns.append(
                TurnRecord(
                    rid=result.rid,
                    finish="abort",
                    sampled=len(result.output_ids),
                    kept=keep > 0,
                    kept_tokens=keep,
                    weight_version=version,
                    attempts=result.attempts,
                )
            )
            return ModelTurn(
                text=self._decode_reply(result.output_ids), finish_reason=FinishReason.ABORT, new_tokens=keep
            )
        self._append_sampled(result, len(result.output_ids))
        state.turns.append(
            TurnRecord(
                rid=result.rid,
                finish=result.finish,
                sampled=len(result.output_ids),
                kept=True,
                kept_tokens=len(result.output_ids),
                weight_version=version,
                attempts=result.attempts,
            )
        )
        if self.return_routed_experts:
            self._store_routed_experts(result)
        return self._finish_turn(result)

    def _finish_turn(self, result: GenerateResult | None) -> ModelTurn:
        """Close the owed turn: its tokens are the kept partial ones plus ``result``'s
        (None: no request, the kept tokens filled the cap, a LENGTH finish)."""
        state = self.state
        new = list(result.output_ids) if result is not None else []
        ids = [*self.buffer.input_ids[len(self.buffer) - len(new) - state.partial_tokens :]]
        state.partial_tokens = 0
        state.awaiting_generation = False
        state.last_sampled_id = ids[-1] if ids else None
        text = self._decode_reply(ids)
        tool_calls: list[ToolCall] = []
        parse_error: str | None = None
        content = text
        if self.parser is not None:
            parsed = self.parser.parse(self._markup_text(ids), id_prefix=f"call_{state.turn_counter}")
            tool_calls, parse_error = parsed.tool_calls, parsed.error
            content = parsed.content if parsed.error is None else text
        state.messages.append(_assistant_message(self.template.reply_content(content), tool_calls))
        return ModelTurn(
            text=text,
            tool_calls=tool_calls,
            parse_error=parse_error,
            finish_reason=_FINISH[result.finish] if result is not None else FinishReason.LENGTH,
            new_tokens=len(new),
        )

    # --- internals ------------------------------------------------------------------

    def _label(self, server: str | None) -> str | None:
        """The version label of tokens the server stamped ``server`` (None: unset)."""
        if server is not None:
            self.state.version_sources.setdefault(server, "server")
            return server
        if self.weight_version is not None:
            self.state.version_sources.setdefault(self.weight_version, "spec")
        return self.weight_version

    def _append_sampled(self, result: GenerateResult, count: int) -> None:
        """Append the first ``count`` sampled tokens, each with the version of its span."""
        ids, logprobs = result.output_ids[:count], result.logprobs[:count]
        versions = [self._label(v) for v in result.token_versions[:count]] or [
            self._label(result.weight_version)
        ] * len(ids)
        start = 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or versions[end] != versions[start]:
                self.buffer.append_sampled(ids[start:end], logprobs[start:end], versions[start])
                start = end

    def _store_routed_experts(self, result: GenerateResult, *, aborted: bool = False) -> None:
        """Keep the rows this turn added, after checking they line up with its tokens.

        An aborted request (onAbort Keep) gives rows for all it generated; only those of
        the kept tokens are stored, and none when it gave fewer (an abort in the waiting
        queue): the next request asks from the same start and covers them."""
        state = self.state
        if state.routed_experts_width == 0:
            return  # given up on earlier (see the note)
        expected = len(self.buffer) - 1 - state.routed_experts_rows
        raw = result.routed_experts
        if aborted:
            width = state.routed_experts_width
            if raw is None or expected <= 0 or not width or len(raw) < 4 * width * expected:
                return
            raw = raw[: 4 * width * expected]
        problem: str | None = None
        if state.expanded_image_tokens:
            problem = (
                "routing rows are not stored for a run with issue images: the server's rows cover each "
                "image's expanded tokens, the token list holds one placeholder per image"
            )
        elif raw is None:
            problem = (
                "routed experts were requested but the server returned none; start SGLang with "
                "--enable-return-routed-experts"
            )
        elif expected <= 0 or len(raw) % (4 * expected):
            problem = (
                f"the server returned {len(raw) // 4} routed-expert values for {expected} new tokens, "
                "not a whole number of rows; routing rows are not stored for this run"
            )
        elif state.routed_experts_width not in (None, len(raw) // (4 * expected)):
            problem = "the routed-experts row width changed between turns; routing rows are not stored for this run"
        if problem is not None:
            state.routed_experts_width = 0
            state.routed_experts.clear()
            state.routed_experts_rows = 0
            if problem not in state.notes:
                state.notes.append(problem)
            return
        assert raw is not None
        state.routed_experts_width = len(raw) // (4 * expected)
        state.routed_experts.append(base64.b64encode(raw).decode("ascii"))
        state.routed_experts_rows += expected

    def routed_experts_bytes(self) -> bytes | None:
        """One little-endian int32 routing row per token of the list, None when there are none:
        the server's rows (``state.routed_experts_rows`` of them), then zero filler for the
        tokens it never forwarded (the final sampled token, a trailing delta). The alignment
        is Trajectory's (swerollout/wire/trajectory.py)."""
        width = self.state.routed_experts_width
        if not width:
            return None
        filler = bytes(4 * width * (len(self.buffer) - self.state.routed_experts_rows))
        return b"".join(base64.b64decode(chunk) for chunk in self.state.routed_experts) + filler

    def _prepare_request(self) -> None:
        """Turn pending messages into tokens so the list ends with a generation prompt."""
        state = self.state
        if state.awaiting_generation:
            if state.pending:
                raise ModelError(
                    "messages were added while a turn was still owed (after an abort, call generate() "
                    "to re-sample the interrupted turn before adding environment messages)"
                )
            return
        if not self.buffer.input_ids:
            if not state.pending:
                raise ModelError("no messages: add the system/user prompt before generate()")
            pad_id = self._image_pad_id(state.pending)
            self.buffer.set_prompt(self.template.prompt_ids(state.pending))
            self._check_image_placeholders(state.pending, pad_id)
        else:
            delta = self.template.delta_ids(
                state.messages, state.pending, state.last_sampled_id, self._last_sampled_text()
            )
            self.buffer.append_context(delta)
        state.messages.extend(state.pending)
        state.pending.clear()
        state.awaiting_generation = True

    def _image_pad_id(self, messages: list[dict[str, Any]]) -> int | None:
        """The template's image pad token when the messages hold images; never a silent drop."""
        count = len(image_urls(messages))
        if not count:
            return None
        placeholder = image_placeholder(self.tokenizer)
        if placeholder is None:
            raise ChatTemplateError(text_only_message(str(getattr(self.tokenizer, "name_or_path", "?")), count))
        return placeholder.pad_id

    def _check_image_placeholders(self, messages: list[dict[str, Any]], pad_id: int | None) -> None:
        """Each image must have its placeholder in the prompt, or the server pairs images wrongly."""
        count = len(image_urls(messages))
        rendered = 0 if pad_id is None else self.buffer.input_ids.count(pad_id)
        if rendered != count:
            raise ChatTemplateError(f"the chat template rendered {rendered} image placeholders for {count} images")

    def _token_limit(self, requested: int | None) -> int | None:
        """``max_new_tokens`` of the next request; None when tokens kept from aborted
        requests already fill the turn's cap (the turn ends without a request)."""
        # The server counts each image's expanded tokens (learnt from its last answer).
        used = len(self.buffer) + self.state.expanded_image_tokens
        room = self.max_context_tokens - used
        if room <= 0:
            raise ContextBudgetError(
                f"the context holds {used} tokens, max_context_tokens is "
                f"{self.max_context_tokens}: no room for another turn"
            )
        limits = [room]
        partial = self.state.partial_tokens
        per_turn = [cap for cap in (self.sampling.max_new_tokens, requested) if cap is not None]
        if per_turn and min(per_turn) - partial <= 0:
            return None
        limits.extend(cap - partial for cap in per_turn)
        server = self.server_limits
        if server is not None:
            server_room = server.max_new_tokens(used)
            if not server.prompt_fits(used) or server_room <= 0:
                raise ContextBudgetError(
                    f"the context holds {used} tokens; the server admits prompts below "
                    f"{server.max_req_input_len} tokens (context length {server.context_length}, "
                    "SGLang's margin included): no room for another turn"
                )
            limits.append(server_room)
        if self.max_sampled_tokens is not None:
            left = self.max_sampled_tokens - self.state.sampled_total
            if left <= 0:
                raise ContextBudgetError(
                    f"sampled-token budget spent: {self.state.sampled_total} tokens sampled "
                    f"({self.state.dropped_total} of them dropped by aborts), "
                    f"spec.inference.maxSampledTokens is {self.max_sampled_tokens}"
                )
            limits.append(left)
        return max(1, min(limits))

    def _last_sampled_text(self) -> str:
        """The last sampled turn as text, special tokens included (the run of mask-1 tokens at the end)."""
        buf = self.buffer
        start = len(buf)
        while start > buf.prompt_length and buf.loss_mask[start - 1]:
            start -= 1
        return str(self.tokenizer.decode(buf.input_ids[start:], skip_special_tokens=False))

    def _markup_text(self, output_ids: list[int]) -> str:
        """The reply for the tool-call parser: markup only where the policy sampled markup tokens.

        Text the policy spelled with ordinary tokens (``grep '</tool_call>'``) is escaped,
        so it stays part of an argument or the content."""
        ids = output_ids[:-1] if output_ids and self.template.is_special(output_ids[-1]) else output_ids
        parts: list[str] = []
        run: list[int] = []
        for token in [*ids, None]:
            if token is not None and not self.template.is_added(token):
                run.append(token)
                continue
            if run:
                parts.append(escape_markup(self.template.decode(run), self._markup))
                run = []
            if token is not None:
                parts.append(self.template.decode([token]))
        return "".join(parts)

    def _decode_reply(self, output_ids: list[int]) -> str:
        """The reply's text without its final end-of-turn token."""
        ids = output_ids
        if ids and self.template.is_special(ids[-1]):
            ids = ids[:-1]
        return self.template.decode(ids)

    # --- snapshot / resume / result -------------------------------------------------

    def snapshot(self, agent_state: dict[str, Any] | None = None) -> bytes:
        return Snapshot(state=self.state, agent_state=agent_state or {}, buffer=self.buffer).to_bytes()

    @classmethod
    def restore(
        cls, blob: bytes, tokenizer: AnyTokenizer, client: SGLangClient, **kwargs: Any
    ) -> tuple[RLTokenModel, dict[str, Any]]:
        """A model continuing the snapshot's conversation, and the agent state it carried."""
        snap = Snapshot.from_bytes(blob)
        model = cls(tokenizer, client, **kwargs)
        model.buffer = snap.buffer
        model.state = snap.state
        return model, snap.agent_state

    def trajectory(
        self,
        *,
        exit_status: str | None,
        submission: str = "",
        timings: dict[str, float] | None = None,
        info: dict[str, Any] | None = None,
    ) -> Trajectory:
        buf = self.buffer
        start = buf.prompt_length
        extra = {
            "rids": [t.rid for t in self.state.turns],
            "sampled_total": self.state.sampled_total,
            "dropped_total": self.state.dropped_total,
            "weight_version_sources": dict(self.state.version_sources),
            **({"notes": list(self.state.notes)} if self.state.notes else {}),
            # Every /generate call in order, aborted ones included: where the viewer marks aborts and resumes.
            "turn_log": [t.model_dump() for t in self.state.turns],
            "kept_tokens": buf.sampled_tokens,
            "mixed_version_turns": mixed_version_turns(buf),
            "replaced_code_points": self.state.replaced_code_points,
            **self._image_info(),
            **(info or {}),
        }
        return Trajectory(
            run_uid=self.run_uid,
            prompt_ids=buf.input_ids[:start],
            response_ids=buf.input_ids[start:],
            loss_mask=list(buf.loss_mask[start:]),
            logprobs=buf.logprobs[start:],
            weight_versions=buf.weight_versions[start:],
            messages=self.messages,
            exit_status=exit_status,
            submission=submission,
            turns=sum(1 for m in self.state.messages if m.get("role") == "assistant"),
            timings=timings or {},
            routed_experts=self.routed_experts_bytes() if self.return_routed_experts else None,
            routed_experts_width=self.state.routed_experts_width or None if self.return_routed_experts else None,
            routed_experts_forwarded=(
                self.state.routed_experts_rows
                if self.return_routed_experts and self.state.routed_experts_width
                else None
            ),
            info=extra,
        )

    def _image_info(self) -> dict[str, Any]:
        """With images: how many, and the tokens the server expanded their placeholders into."""
        count = len(image_urls(self.state.messages))
        if not count:
            return {}
        return {"images": count, "expanded_image_tokens": self.state.expanded_image_tokens}


def _assistant_message(content: str, tool_calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            # Arguments stay an object: templates that render them with tojson would
            # otherwise encode a JSON string twice (ChatTemplate hands text to the others).
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
            for c in tool_calls
        ]
    return message


def mixed_version_turns(buf: TokenBuffer) -> list[dict[str, Any]]:
    """The assistant turns sampled by more than one weight version: a turn kept across an
    abort (onAbort Keep), or one whose request spanned a weight update. Each entry gives
    the turn's ``start``/``end`` in ``response_ids`` and its ``versions`` in order.

    A turn is one run of loss-mask-1 tokens: the template's delta always separates two turns."""
    turns: list[dict[str, Any]] = []
    versions = buf.weight_versions
    mask = buf.loss_mask
    i, n = buf.prompt_length, len(buf)
    while i < n:
        if not mask[i]:
            i += 1
            continue
        start = i
        seen: list[str | None] = []
        while i < n and mask[i]:
            if not seen or seen[-1] != versions[i]:
                seen.append(versions[i])
            i += 1
        if len(seen) > 1:
            turns.append({"start": start - buf.prompt_length, "end": i - buf.prompt_length, "versions": seen})
    return turns
