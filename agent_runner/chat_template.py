"""Chat-template deltas: the tokens that append environment messages to a live token list.

The runner never re-tokenizes history. The token list of a conversation is

    prompt_ids + sampled_1 + delta_1 + sampled_2 + delta_2 + ... + sampled_n [+ delta_n]

where ``prompt_ids`` is the tokenization of the template's rendering of the initial
messages (with the generation prompt), each ``sampled_k`` is exactly the ``output_ids``
the server returned, and each ``delta_k`` is computed here, generically, from the
tokenizer's own chat template (no model-name special cases):

1. Render the conversation so far with the last assistant turn replaced by a
   sentinel content, followed by the new environment messages and the generation
   prompt. Everything after the sentinel is the *tail*: what the template emits to
   close an assistant turn (e.g. Qwen's ``<|im_end|>\\n``), the new messages, and the
   opening of the next assistant turn. Earlier messages are rendered as short stubs
   (same roles, placeholder content): templates decide how to render what follows
   from the roles before it, not from their text. Long histories are further cut
   to a window (the messages before the first assistant turn, the first exchange,
   and the last few messages), so a delta costs the same at turn 5 and turn 500.
   The window is checked against the full stubbed history whenever the history
   length passes a power of two; if a template ever renders the tail differently,
   windowing is switched off for it (exact again, at O(history) cost).
2. If the model ended its turn with a special token (its end-of-turn/stop token) and
   the tail begins with that token's text (after optional whitespace the model did
   not produce), the tail is cut after it: that token is already in the list as a
   sampled token. Otherwise -- a length cut, or a stop token the template does not
   use to close this turn -- the whole tail is appended, so the turn is still closed
   the way the template closes it.
3. The tail text is tokenized on its own. Tails begin right after a special token
   (or with one), so tokenizing them separately gives the same tokens as tokenizing
   the whole rendering.

How the final token list relates to ``render(final messages)``: decoding it equals
the template's rendering of the final messages whenever (a) each sampled turn is the
text the template would render for that assistant message, ending with the
template's end-of-turn token, and (b) the template renders history turns the same
way it rendered them when they were the newest turn. Where a template legitimately
differs, the token list keeps what was sampled (it is what the policy saw and
produced): Qwen3 strips ``<think>`` from assistant turns before the last user
message; GLM-4.5+ and DeepSeek V3.1 drop reasoning of earlier turns; DeepSeek V3's
template opens tool outputs with ``<｜tool▁outputs▁begin｜>`` only once per
conversation, and the delta reproduces that because it renders the real roles.
tests/agent_runner/core/test_chat_template.py checks both the exact and the differing
cases on real tokenizers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent_runner.errors import ChatTemplateError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Message = Mapping[str, Any]

# Content no real conversation contains; marks where the last assistant turn ends.
_SENTINEL = "\u2063SWEROLLOUT-TURN-END\u2063"
# Content of stubbed history messages (never empty: some templates skip empty turns).
_STUB = "."
# Messages kept at the end of a windowed history (see the module docstring).
_WINDOW = 8
# Histories shorter than this are always rendered whole.
_WINDOW_FROM = 24


class ChatTemplate:
    """A tokenizer's chat template, rendered with a fixed set of tools."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        window: bool = True,
    ) -> None:
        """``window=False`` always renders the whole (stubbed) history for a delta."""
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                "pick an instruct/chat tokenizer or a directory with chat_template.jinja"
            )
        self.tokenizer = tokenizer
        self.tools: list[dict[Any, Any] | Callable[..., Any]] | None = [dict(t) for t in tools] if tools else None
        self.template_kwargs = dict(template_kwargs or {})
        self._window_ok = window
        self._window_checked: set[int] = set()
        self._special_ids = frozenset(int(i) for i in tokenizer.all_special_ids) | frozenset(
            int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special
        )

    @property
    def source(self) -> str:
        template = self.tokenizer.chat_template
        return template if isinstance(template, str) else str(template)

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        try:
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages],
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

    def encode(self, text: str) -> list[int]:
        # The template text already holds BOS and role tokens: add nothing.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """Tokens of the first request: the initial messages plus the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def tail_text(self, history: Sequence[Message], new_messages: Sequence[Message]) -> str:
        """Text the template emits after the last assistant turn of ``history``'s content.

        ``history`` must end with an assistant message; only its roles matter.
        """
        if not history or history[-1].get("role") != "assistant":
            raise ChatTemplateError("an environment delta needs a history ending with an assistant turn")
        earlier = history[:-1]
        if not self._window_ok or len(earlier) < _WINDOW_FROM:
            return self._tail(_stubs(earlier), new_messages)
        tail = self._tail(_window(earlier), new_messages)
        size_class = len(earlier).bit_length()
        if size_class not in self._window_checked:
            self._window_checked.add(size_class)
            exact = self._tail(_stubs(earlier), new_messages)
            if exact != tail:
                self._window_ok = False
                return exact
        return tail

    def _tail(self, earlier: list[dict[str, Any]], new_messages: Sequence[Message]) -> str:
        text = self.render([*earlier, {"role": "assistant", "content": _SENTINEL}, *new_messages], add_generation_prompt=True)
        at = text.rfind(_SENTINEL)
        if at < 0:
            raise ChatTemplateError(
                "the chat template dropped the assistant turn's content; cannot locate the turn end"
            )
        return text[at + len(_SENTINEL) :]

    @property
    def windowing(self) -> bool:
        """False once the history window was found to change this template's tails."""
        return self._window_ok

    def delta_text(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled_id: int | None,
    ) -> str:
        """Text to append after the sampled tokens so the list ends with a generation prompt."""
        tail = self.tail_text(history, new_messages)
        if last_sampled_id is None or not self.is_special(last_sampled_id):
            return tail
        stop_text = str(self.tokenizer.decode([last_sampled_id], skip_special_tokens=False))
        stripped = tail.lstrip()
        if stop_text and stripped.startswith(stop_text):
            return stripped[len(stop_text) :]
        return tail

    def delta_ids(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled_id: int | None,
    ) -> list[int]:
        return self.encode(self.delta_text(history, new_messages, last_sampled_id))


def _stubs(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [_stub(m) for m in messages]


def _window(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Stubs of: everything before the first assistant turn, the first exchange, the last few."""
    roles = [m.get("role") for m in messages]
    if "assistant" not in roles:
        return _stubs(messages)
    first = roles.index("assistant")
    second = next((i for i in range(first + 1, len(roles)) if roles[i] == "assistant"), len(roles))
    start = len(roles) - _WINDOW
    # Begin the window at an assistant turn so each kept exchange is whole.
    while start < len(roles) and roles[start] != "assistant":
        start += 1
    if start <= second:
        return _stubs(messages)
    return _stubs([*messages[:second], *messages[start:]])


def _stub(message: Message) -> dict[str, Any]:
    stub: dict[str, Any] = {"role": message.get("role", "user"), "content": _STUB}
    for key in ("tool_call_id", "name"):
        if key in message:
            stub[key] = message[key]
    return stub
