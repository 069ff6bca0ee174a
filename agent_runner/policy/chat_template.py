"""Chat-template deltas: the tokens that append environment messages to a live token list.

The runner never re-tokenizes history. The token list of a conversation is

    prompt_ids + sampled_1 + delta_1 + sampled_2 + delta_2 + ... + sampled_n [+ delta_n]

where ``prompt_ids`` is the encoding of the template's rendering of the initial
messages (with the generation prompt), each ``sampled_k`` is exactly the ``output_ids``
the server returned, and each ``delta_k`` is computed here, generically, from the
tokenizer's own chat template (no model-name special cases).

**Content is text.** Only the template's own structure may produce special (added)
tokens. Message content -- observations, files the agent reads, the problem
statement, tool-call arguments -- is encoded as ordinary text even when it holds
``<|im_end|>``, ``<think>`` or ``<tool_call>``. To know which characters of a
rendering are content, the template is rendered twice: once with every content
string replaced by a marker (a per-conversation random nonce plus an index, checked
to be absent from all content), and once for real. The marker rendering gives the
structure pieces; the real rendering is aligned against them, content by content
(templates may trim content or JSON-escape arguments, so each content string is
matched as one of a few named transforms of itself). The rendering is then encoded
piece by piece: added tokens are recognized in structure pieces only, and each run
of text between two structure added tokens -- structure text and content alike -- is
encoded by the tokenizer's model with no added token at all. For content without
special-token text this is exactly ``tokenizer.encode(rendering)``.

How a delta is found:

1. Render the conversation so far with the last assistant turn's content replaced by
   a marker (its tool calls kept, their argument strings replaced by markers),
   followed by the new environment messages and the generation prompt. Everything
   after that turn's body is the *tail*: what the template emits to close an
   assistant turn (e.g. Qwen's ``<|im_end|>\\n``), the new messages, and the opening of
   the next assistant turn. Earlier messages are rendered as stubs: their roles,
   tool calls (names, ids and argument keys), tool-message names and ids, and
   whether content and reasoning were empty, with placeholder text. Templates decide
   how to render what follows from those fields, never from the text, so the tail of
   the stubbed history equals the tail of the real one. The whole stubbed history
   is rendered every time (a window over it is not sound: some templates carry state
   across many messages, e.g. "first tool output since the last user turn"); bench
   ``runner_overhead`` measures the per-turn cost.
2. If the model ended its turn with a special token (its end-of-turn/stop token) and
   the template's closing of the turn contains that token's text (right after the
   content, after optional whitespace; or after the tool calls' structure when the
   turn has tool calls), the tail is cut after it: that token is already in the list
   as a sampled token. If the turn has tool calls and ended otherwise, the longest
   start of the closing that the sampled text already ends with is cut. Otherwise --
   a length cut, or a stop token the template does not use to close this turn -- the
   whole tail is appended, so the turn is still closed the way the template closes it.
3. The tail is encoded on its own with the content-is-text rule. Tails begin right
   after a special token (or with one), so encoding them separately gives the same
   tokens as encoding the whole rendering.

How the final token list relates to ``render(final messages)``: it equals the
content-is-text encoding of the template's rendering of the final messages whenever
(a) each sampled turn is the text the template would render for that assistant
message, ending with the template's end-of-turn token, and (b) the template renders
history turns the same way it rendered them when they were the newest turn. Where a
template legitimately differs, the token list keeps what was sampled (it is what the
policy saw and produced); docs/token-exactness.md names those quirks per family and
tests/agent_runner/core/test_token_properties.py asserts them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent_runner.policy.errors import ChatTemplateError
from agent_runner.policy.images import map_text_parts, template_content

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from swerollout.runner_tokenizer import AnyTokenizer

Message = Mapping[str, Any]
Piece = tuple[str, bool]
"""A span of a rendering: (text, is_content)."""

# Reasoning tags of replies when the template names none (the common convention).
_DEFAULT_REASONING_TAGS = ("</think>", "<think>")
# What a sampled unknown token decodes to: the newline (the character a vocabulary without
# byte fallback lacks where it matters most: without it a text agent writes no code block),
# else the Unicode replacement character.
_UNKNOWN_CANDIDATES = ("\n", "\ufffd")
# Placeholder text of stubbed history content (non-empty content stays non-empty).
_STUB = "."


class ChatTemplate:
    """A tokenizer's chat template, rendered with a fixed set of tools."""

    def __init__(
        self,
        tokenizer: AnyTokenizer,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        nonce: str | None = None,
    ) -> None:
        """``nonce`` fixes the content marker (tests); by default it is random per conversation."""
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                "pick an instruct/chat tokenizer or a directory with chat_template.jinja"
            )
        self.tokenizer = tokenizer
        self.tools: list[dict[Any, Any] | Callable[..., Any]] | None = [dict(t) for t in tools] if tools else None
        self.template_kwargs = dict(template_kwargs or {})
        # Letters and digits only: markers survive tojson, trimming and escaping unchanged.
        self.nonce = nonce or f"SWRX{secrets.token_hex(8).upper()}Q"
        self._marker_re = re.compile(re.escape(self.nonce) + r"(\d+)Z")
        self._special_ids = frozenset(int(i) for i in tokenizer.all_special_ids) | frozenset(
            int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special
        )
        self._added = {str(tok.content): int(i) for i, tok in tokenizer.added_tokens_decoder.items()}
        self._added_re = re.compile("|".join(re.escape(t) for t in sorted(self._added, key=len, reverse=True)))
        self._text_model = _text_only(tokenizer)
        self._unknown = self._unknown_character()
        # Reasoning tags the template splits assistant content at (``<think>``, ``</mm:think>``):
        # markers keep them, so a template that branches on them renders the same structure.
        tags = sorted(set(re.findall(r"</?(?:[A-Za-z]+:)?think>", self.source)), key=len, reverse=True)
        self._tags_re = re.compile("|".join(re.escape(t) for t in tags)) if tags else None
        self.reasoning_tags: tuple[str, ...] = tuple(tags) or _DEFAULT_REASONING_TAGS
        """The tags that open and close reasoning in this family's replies (the template's own;
        ``<think>``/``</think>`` when it names none)."""
        self._args_as_text = self._needs_text_arguments()
        self.opening_gap = self._opening_gap()

    @property
    def reasoning_ends(self) -> tuple[str, ...]:
        """The tags that close reasoning: the tool-call parser reads calls only after the last."""
        return tuple(t for t in self.reasoning_tags if t.startswith("</"))

    @property
    def source(self) -> str:
        template = self.tokenizer.chat_template
        return template if isinstance(template, str) else str(template)

    # --- rendering ---------------------------------------------------------------------

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The template's text for ``messages`` (tool-call arguments as the template wants them)."""
        prepared = [self._template_message(m) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(
                prepared,
                tools=self.tools,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja raises many types; the template is third-party code
            raise ChatTemplateError(f"the chat template failed to render: {exc}") from exc
        if not isinstance(text, str):
            raise ChatTemplateError(f"the chat template rendered {type(text).__name__}, not text")
        return text

    def render_pieces(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[Piece]:
        """The rendering of ``messages`` split into structure and content pieces."""
        values: list[str] = []
        marked = [_mark(m, self._marker_for(values), self._tags_re) for m in messages]
        self._check_markers_absent(values)
        structure = self.render(marked, add_generation_prompt=add_generation_prompt)
        real = self.render(messages, add_generation_prompt=add_generation_prompt)
        return self._align(structure, real, values)

    def _marker_for(self, values: list[str]) -> Callable[[str], str]:
        def marker(value: str) -> str:
            values.append(value)
            return f"{self.nonce}{len(values) - 1}Z"

        return marker

    def _check_markers_absent(self, values: Sequence[str]) -> None:
        for value in values:
            if self.nonce in value:
                # 2^64 nonces: only content that read this conversation's nonce can hold it.
                raise ChatTemplateError("message content contains this conversation's content marker")

    def _align(self, structure: str, real: str, values: Sequence[str]) -> list[Piece]:
        """Split ``real`` as ``structure`` split at markers, each marker replaced by its content."""
        parts = self._marker_re.split(structure)
        fixed = parts[0::2]
        indices = [int(i) for i in parts[1::2]]
        if not real.startswith(fixed[0]):
            raise ChatTemplateError("the chat template renders structure differently when content changes")
        pieces: list[Piece] = [(fixed[0], False)]

        def walk(at: int, k: int) -> bool:
            if k == len(indices):
                return at == len(real)
            after = fixed[k + 1]
            for candidate in _renderings(values[indices[k]]):
                if real.startswith(candidate, at) and real.startswith(after, at + len(candidate)):
                    pieces.append((candidate, True))
                    pieces.append((after, False))
                    if walk(at + len(candidate) + len(after), k + 1):
                        return True
                    del pieces[-2:]
            return False

        if not walk(len(fixed[0]), 0):
            raise ChatTemplateError(
                "the chat template transforms message content in a way the runner cannot separate "
                "from its structure (content must render verbatim, trimmed or JSON-escaped)"
            )
        return pieces

    def _template_message(self, message: Message) -> dict[str, Any]:
        """The message as handed to the template: arguments as JSON text if it concatenates them."""
        out = dict(message)
        if isinstance(out.get("content"), list):
            out["content"] = template_content(out["content"])
        if self._args_as_text and out.get("tool_calls"):
            calls = []
            for call in out["tool_calls"]:
                function = dict(call.get("function") or {})
                if not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments", {}), ensure_ascii=False)
                calls.append({**call, "function": function})
            out["tool_calls"] = calls
        return out

    def _needs_text_arguments(self) -> bool:
        """Whether the template concatenates arguments as text (DeepSeek V3) instead of tojson."""
        self._args_as_text = False
        probe: list[dict[str, Any]] = [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "a",
                "tool_calls": [
                    {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "r"},
        ]
        try:
            text = self.render(probe, add_generation_prompt=True)
        except ChatTemplateError:
            return True
        return "{'command'" in text

    def _opening_gap(self) -> str:
        """Whitespace a history turn puts between the assistant opening and the content that
        the generation prompt stops before: DeepSeek V2 prompts ``Assistant:`` and renders
        ``Assistant: {content}``, GLM-4 prompts ``<|assistant|>`` and renders
        ``<|assistant|>\n{content}``. The policy samples that whitespace; ``reply_content``
        drops it from the message record, so the template does not render it twice.

        Refuses a template whose rendering ignores the generation prompt and does not end
        where an assistant turn begins (a reward-model template closing every rendering
        with ``<|endoftext|>``): there is no place for a policy to continue."""
        probe: list[dict[str, Any]] = [{"role": "user", "content": "u"}]
        marker = f"{self.nonce}0Z"
        try:
            prompt = self.render(probe, add_generation_prompt=True)
            bare = self.render(probe, add_generation_prompt=False)
            turn = self.render([*probe, {"role": "assistant", "content": marker}], add_generation_prompt=False)
        except ChatTemplateError:
            return ""  # the template needs more than this probe; rendering reports it later
        opening = turn[: turn.find(marker)] if marker in turn else ""
        if prompt == bare and opening and not opening.startswith(prompt):
            raise ChatTemplateError(
                f"the chat template has no generation prompt: its rendering ends {prompt[-40:]!r} whether or not "
                f"one is asked for, while an assistant turn opens {opening[-40:]!r}; it cannot prompt a policy "
                "(a reward-model template?); pick the tokenizer of a chat/instruct model"
            )
        gap = opening[len(prompt) :] if opening.startswith(prompt) else ""
        return gap if not gap.strip() else ""

    def check_tool_turns(self) -> None:
        """Refuse the tool-call action format when the template cannot render it consistently.

        Two probes on a two-turn tool conversation (assistant turns with content and one
        call each): every call's arguments appear in the rendering (early DeepSeek V3/R1
        templates render calls only when the content is None), and each turn's rendering
        in history begins as the generation prompt before it ends, reasoning tags aside
        (the R1 template closes tool outputs before a text reply only, so the prompt after
        tool outputs is not how the next tool-call turn is rendered)."""
        values: list[str] = []
        marker = self._marker_for(values)

        def call(i: int) -> dict[str, Any]:
            return {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "bash", "arguments": {"command": marker("x")}},
            }

        conversation: list[dict[str, Any]] = [{"role": "user", "content": "u"}]
        for i in range(2):
            conversation += [
                {"role": "assistant", "content": marker("a"), "tool_calls": [call(i)]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "r"},
            ]
        problem = None
        full = self.render(conversation, add_generation_prompt=True)
        if any(f"{self.nonce}{i}Z" not in full for i in range(len(values))):
            problem = "it drops the content or the tool calls of a tool-call turn (it renders calls only when content is None, or only in the first turn)"
        for i, at in enumerate((1, 3)):
            if problem:
                break
            prompt = self.render(conversation[:at], add_generation_prompt=True)
            turn = self.render(conversation[: at + 1], add_generation_prompt=False)
            # The turn's own markers: its content (2i) and its call's argument (2i + 1).
            starts = [turn.find(f"{self.nonce}{k}Z") for k in (2 * i, 2 * i + 1)]
            opening = turn[: min(x for x in starts if x >= 0)]
            a, b = (self._tags_re.sub("", x).rstrip() if self._tags_re else x.rstrip() for x in (prompt, opening))
            if not (a.startswith(b) or b.startswith(a)):
                problem = (
                    f"its generation prompt after tool outputs ends {prompt[-40:]!r}, but it renders the next "
                    f"tool-call turn as {opening[-60:]!r}"
                )
        if problem:
            raise ChatTemplateError(
                f"the chat template cannot carry tool calls exactly: {problem}; use the text action format "
                "(a text agent) or a tokenizer whose template renders tool calls"
            )

    def reply_content(self, text: str) -> str:
        """The message-record content of a sampled reply (see ``_opening_gap``)."""
        gap = self.opening_gap
        return text[len(gap) :] if gap and text.startswith(gap) else text

    # --- encoding ----------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Template text: added tokens recognized (the text is all structure)."""
        return self.encode_pieces([(text, False)])

    def encode_text(self, text: str) -> list[int]:
        """Content: special-token text stays text."""
        return list(self._text_model.encode(text, add_special_tokens=False).ids) if text else []

    def decode(self, ids: Sequence[int]) -> str:
        """The text of sampled tokens (special tokens included), which encodes back to them.

        A vocabulary without byte fallback encodes characters it lacks as its unknown token
        (jiutian has no newline): a sampled unknown token is text as ``_unknown_character``,
        not the token's name, which would re-render in the message record as other tokens."""
        unk = self.tokenizer.unk_token_id
        if self._unknown is None or unk not in ids:
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))
        tokens = self.tokenizer.convert_ids_to_tokens(list(ids))
        return str(
            self.tokenizer.convert_tokens_to_string(
                [self._unknown if token_id == unk else token for token_id, token in zip(ids, tokens, strict=True)]
            )
        )

    def _unknown_character(self) -> str | None:
        """The character a sampled unknown token stands for: the first of ``_UNKNOWN_CANDIDATES``
        that the vocabulary encodes as its unknown token; None when it encodes them all (or
        has no unknown token, as byte-level vocabularies)."""
        unk = self.tokenizer.unk_token_id
        if unk is None:
            return None
        for char in _UNKNOWN_CANDIDATES:
            if self.encode_text(f"x{char}x").count(unk) == 1:
                return char
        return None

    def encode_pieces(self, pieces: Sequence[Piece]) -> list[int]:
        ids: list[int] = []
        run: list[str] = []
        for text, is_content in pieces:
            if is_content:
                run.append(text)
                continue
            at = 0
            for match in self._added_re.finditer(text) if self._added else ():
                run.append(text[at : match.start()])
                ids.extend(self.encode_text("".join(run)))
                run = []
                ids.append(self._added[match.group()])
                at = match.end()
            run.append(text[at:])
        ids.extend(self.encode_text("".join(run)))
        return ids

    def encode_messages(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> list[int]:
        """The content-is-text encoding of the template's rendering of ``messages``."""
        return self.encode_pieces(self.render_pieces(messages, add_generation_prompt=add_generation_prompt))

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """Tokens of the first request: the initial messages plus the generation prompt."""
        return self.encode_messages(messages, add_generation_prompt=True)

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def is_added(self, token_id: int) -> bool:
        """Special tokens and other added tokens (``<tool_call>``, ``<think>``): what content must never become."""
        return token_id in self._special_ids or token_id in self._added.values()

    # --- deltas ------------------------------------------------------------------------

    def tail_pieces(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled_id: int | None = None,
        sampled_text: str | None = None,
    ) -> list[Piece]:
        """What to append after the sampled tokens so the list ends with a generation prompt.

        ``history`` must end with the assistant turn just sampled; ``sampled_text`` is
        its decoded tokens (special tokens included).
        """
        if not history or history[-1].get("role") != "assistant":
            raise ChatTemplateError("an environment delta needs a history ending with an assistant turn")
        values: list[str] = []
        marker = self._marker_for(values)
        # The sampled turn's text is in the list already: placeholders stand in for it.
        last = _stub(history[-1], lambda value: marker(_STUB), self._tags_re)
        if not self._tags_re or not self._tags_re.search(str(last.get("content") or "")):
            last["content"] = marker(_STUB)
        elif not values:  # reasoning tags and whitespace only: a marker still ends the turn's body
            last["content"] += marker(_STUB)
        body_end = len(values)  # markers of the sampled turn: its content and argument strings
        marked_new = [_mark(m, marker, self._tags_re) for m in new_messages]
        self._check_markers_absent(values)
        earlier = [_stub(m, None, self._tags_re) for m in history[:-1]]
        structure = self.render([*earlier, last, *marked_new], add_generation_prompt=True)
        real = self.render([*earlier, self._with_values(last, values), *new_messages], add_generation_prompt=True)
        pieces = self._align(structure, real, values)
        # Everything up to the last marker of the sampled turn is its body.
        turn_markers = [f"{self.nonce}{i}Z" for i in range(body_end)]
        last_body = max(structure.rfind(m) for m in turn_markers)
        if last_body < 0:
            raise ChatTemplateError(
                "the chat template dropped the assistant turn's content; cannot locate the turn end"
            )
        end_of_marker = self._marker_re.match(structure, last_body)
        assert end_of_marker is not None
        cut_at = end_of_marker.end()
        closing_len = len(self._marker_re.split(structure[cut_at:], maxsplit=1)[0])
        skip = self._closing_skip(
            structure[cut_at : cut_at + closing_len], bool(history[-1].get("tool_calls")), last_sampled_id, sampled_text
        )
        return _drop_prefix(pieces, self._real_offset(structure, pieces, cut_at) + skip)

    def _with_values(self, marked: Mapping[str, Any], values: Sequence[str]) -> dict[str, Any]:
        """Undo the marking: every marker string back to its value."""

        def back(text: str) -> str:
            return self._marker_re.sub(lambda match: values[int(match.group(1))], text)

        out = dict(marked)
        for key in ("content", "reasoning_content"):
            if isinstance(out.get(key), str):
                out[key] = back(out[key])
        if out.get("tool_calls"):
            out["tool_calls"] = [_map_arguments(call, back) for call in out["tool_calls"]]
        return out

    def _real_offset(self, structure: str, pieces: Sequence[Piece], structure_at: int) -> int:
        """Offset in the real rendering of the point ``structure_at`` of the marker rendering,
        which lies in a structure piece (content pieces differ in length between the two)."""
        s_pos = r_pos = 0
        for text, is_content in pieces:
            if is_content:
                # The marker rendering holds a marker where the real one holds the content.
                match = self._marker_re.match(structure, s_pos)
                assert match is not None
                s_pos = match.end()
                r_pos += len(text)
                continue
            if s_pos <= structure_at <= s_pos + len(text):
                return r_pos + (structure_at - s_pos)
            s_pos += len(text)
            r_pos += len(text)
        raise ChatTemplateError("the turn end lies outside the template's structure")

    def _closing_skip(
        self, closing: str, has_calls: bool, last_sampled_id: int | None, sampled_text: str | None
    ) -> int:
        """Characters of the turn's closing the policy already sampled."""
        if last_sampled_id is not None and self.is_special(last_sampled_id):
            stop_text = str(self.tokenizer.decode([last_sampled_id], skip_special_tokens=False))
            at = closing.find(stop_text) if stop_text else -1
            if at >= 0 and (has_calls or not closing[:at].strip()):
                return at + len(stop_text)
        if has_calls and sampled_text:
            for k in range(len(closing), 0, -1):
                if sampled_text.endswith(closing[:k]):
                    return k
        return 0

    def delta_pieces(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled_id: int | None,
        sampled_text: str | None = None,
    ) -> list[Piece]:
        return self.tail_pieces(history, new_messages, last_sampled_id, sampled_text)

    def delta_text(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled_id: int | None,
        sampled_text: str | None = None,
    ) -> str:
        return "".join(t for t, _ in self.delta_pieces(history, new_messages, last_sampled_id, sampled_text))

    def delta_ids(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled_id: int | None,
        sampled_text: str | None = None,
    ) -> list[int]:
        return self.encode_pieces(self.delta_pieces(history, new_messages, last_sampled_id, sampled_text))


def _text_only(tokenizer: AnyTokenizer) -> Tokenizer:
    """The tokenizer's normalizer, pre-tokenizer and model with no added tokens at all.

    Cached on the tokenizer object (cheap to build, but built once per conversation otherwise)."""
    cached = getattr(tokenizer, "_swerollout_text_only", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    model = _build_text_only(tokenizer)
    vars(tokenizer)["_swerollout_text_only"] = model  # a cache on a shared object of another library
    return model


def _build_text_only(tokenizer: AnyTokenizer) -> Tokenizer:
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ChatTemplateError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} is not a fast tokenizer; "
            "the runner needs tokenizer.json"
        )
    # Added tokens live in the Tokenizer, not in its model: a Tokenizer around the same
    # model, normalizer and pre-tokenizer (shared, not copied: no vocabulary round trip
    # through JSON, which took seconds per tokenizer) has none, and no post-processor.
    model = backend.model
    if type(model).__name__ == "Unigram":
        model = _unigram_without_added(tokenizer, backend)
    text_only = Tokenizer(model)
    if backend.normalizer is not None:
        text_only.normalizer = backend.normalizer
    if backend.pre_tokenizer is not None:
        text_only.pre_tokenizer = backend.pre_tokenizer
    return text_only


def _unigram_without_added(tokenizer: AnyTokenizer, backend: Tokenizer) -> Any:
    """The backend's Unigram model with its added tokens' pieces scored below every other piece.

    A Unigram vocabulary may hold ``<s>`` as a piece scored 0.0 (the most likely): the
    model alone then segments the text ``a<s>b`` as ``a``, the control token, ``b``."""
    from tokenizers.models import Unigram

    spec = json.loads(backend.to_str())["model"]
    vocab = [(str(piece), float(score)) for piece, score in spec["vocab"]]
    floor = min(score for _, score in vocab) - 1000.0
    for token_id in tokenizer.added_tokens_decoder:
        if 0 <= int(token_id) < len(vocab) and int(token_id) != spec.get("unk_id"):
            vocab[int(token_id)] = (vocab[int(token_id)][0], floor)
    return Unigram(vocab, spec.get("unk_id"), bool(spec.get("byte_fallback", False)))


def _renderings(value: str) -> Iterator[str]:
    """The ways templates render a content string, most common first."""
    seen: set[str] = set()
    # Reasoning-stripping templates render only what follows the last </think> of history turns.
    answer = value.split("</think>")[-1]
    for candidate in (
        value,
        value.strip(),
        value.strip("\n"),
        value.lstrip("\n"),
        value.rstrip("\n"),
        value.lstrip(),
        value.rstrip(),
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(value)[1:-1],
        answer,
        answer.lstrip("\n"),
        answer.strip(),
    ):
        if candidate not in seen:
            seen.add(candidate)
            yield candidate


def _mark(message: Message, marker: Callable[[str], str], tags: re.Pattern[str] | None = None) -> dict[str, Any]:
    """``message`` with every non-empty content string replaced by a marker (order: content,
    reasoning, tool-call argument strings). An assistant's content keeps the template's
    reasoning tags between its markers (see ``_mark_reply``)."""
    out = dict(message)
    for key in ("content", "reasoning_content"):
        value = out.get(key)
        if isinstance(value, str) and value:
            out[key] = (
                _mark_reply(value, marker, tags) if key == "content" and _is_reply(message, tags) else marker(value)
            )
        elif isinstance(value, list):  # content parts: text is content, images are structure
            out[key] = map_text_parts(value, marker)
    if out.get("tool_calls"):
        out["tool_calls"] = [_map_arguments(call, marker) for call in out["tool_calls"]]
    return out


def _map_arguments(call: Mapping[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = {}
    function["arguments"] = _map_strings(arguments if isinstance(arguments, dict) else {}, fn)
    return {**call, "function": function}


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value) if value else value
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value


def _is_reply(message: Message, tags: re.Pattern[str] | None) -> bool:
    content = message.get("content")
    return bool(tags and message.get("role") == "assistant" and isinstance(content, str) and tags.search(content))


def _mark_reply(value: str, marker: Callable[[str], str], tags: re.Pattern[str] | None) -> str:
    """An assistant reply with each text run between reasoning tags replaced by a marker.

    Templates split a reply at ``</think>`` and render the parts in their own structure,
    or drop the reasoning of history turns, or branch on whether the reasoning is empty:
    the tags stay, and whitespace-only runs stay verbatim (a template that strips them
    sees them empty, as it sees the real text). Only the policy's own replies are split so:
    environment content never turns tag text into structure."""
    if tags is None:
        return marker(value)
    out: list[str] = []
    at = 0
    for match in tags.finditer(value):
        run = value[at : match.start()]
        out.append(marker(run) if run.strip() else run)
        out.append(match.group())
        at = match.end()
    run = value[at:]
    out.append(marker(run) if run.strip() else run)
    return "".join(out)


def _stub(
    message: Message, marker: Callable[[str], str] | None = None, tags: re.Pattern[str] | None = None
) -> dict[str, Any]:
    """The fields templates decide structure from, with placeholder text (or markers)."""
    placeholder = marker or (lambda value: _STUB)
    stub: dict[str, Any] = {"role": message.get("role", "user")}
    for key in ("content", "reasoning_content"):
        if key in message:
            value = message[key]
            if key == "content" and _is_reply(message, tags):
                stub[key] = _mark_reply(value, lambda run: placeholder(_STUB), tags)
            else:
                stub[key] = placeholder(value) if isinstance(value, str) and value else value
            if isinstance(value, list):
                stub[key] = map_text_parts(value, placeholder)
    for key in ("tool_call_id", "name"):
        if key in message:
            stub[key] = message[key]
    if message.get("tool_calls"):
        stub["tool_calls"] = [_map_arguments(call, placeholder) for call in message["tool_calls"]]
    return stub


def _drop_prefix(pieces: Sequence[Piece], chars: int) -> list[Piece]:
    out: list[Piece] = []
    for text, is_content in pieces:
        if chars >= len(text):
            chars -= len(text)
            continue
        out.append((text[chars:], is_content))
        chars = 0
    return out
