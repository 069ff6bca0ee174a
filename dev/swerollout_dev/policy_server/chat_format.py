"""What the server needs to know about a tokenizer's chat template, derived from the template.

Nothing here names a model family: the assistant-turn markers and the tokens
that end a turn come from rendering probe conversations with the tokenizer's
own template, and the tool-call markup is picked from markers the template
prints (tool_markup.py).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from swerollout_dev.policy_server.tool_markup import CALL_CLOSE, TOOLS_MARKER, ToolMarkup, detect_markup

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_PROBE_USER = "swerollout-probe-user"
_PROBE_REPLY = "swerollout-probe-reply"
_PROBE_TOOL = "swerollout_probe_tool"
_PROBE_RESULT = "swerollout-probe-result"


@dataclass(frozen=True)
class ChatFormat:
    """Markers of one tokenizer's chat template."""

    assistant_header: str
    """The template's generation prompt (opens the assistant turn to be sampled)."""
    assistant_marker: str
    """Text that starts every assistant turn, in the history and in the open turn."""
    end_of_turn_id: int
    """Token that ends an assistant turn of plain text (Qwen: <|im_end|>, GLM: <|user|>)."""
    end_after_tool_call_id: int
    """Token that ends an assistant turn with tool calls (Qwen: <|im_end|>, GLM: <|observation|>)."""
    markup: ToolMarkup | None
    """How the template writes tool calls; None when it has no tool-call markup we speak."""

    @classmethod
    def from_tokenizer(cls, tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
        user = [{"role": "user", "content": _PROBE_USER}]
        without = _render(tokenizer, user, add_generation_prompt=False)
        with_prompt = _render(tokenizer, user, add_generation_prompt=True)
        header = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
        if not header.strip():
            raise ValueError("the chat template adds no assistant header for add_generation_prompt")
        # The header of a turn in the history can differ from the generation prompt
        # (e.g. an opening <think> only on the open turn): count their common prefix.
        history = _render(
            tokenizer,
            [*user, {"role": "assistant", "content": _PROBE_REPLY}, {"role": "user", "content": _PROBE_USER}],
            add_generation_prompt=False,
        )
        reply_at = history.find(_PROBE_REPLY)
        marker = os.path.commonprefix([header, history[len(without) : reply_at]]).strip() or header.strip()
        end_of_turn = _first_special(tokenizer, history[reply_at + len(_PROBE_REPLY) :])
        if end_of_turn is None:
            if tokenizer.eos_token_id is None:
                raise ValueError("cannot find the end-of-turn token: the template emits none and there is no EOS")
            end_of_turn = int(tokenizer.eos_token_id)
        markup = detect_markup(str(getattr(tokenizer, "chat_template", "") or ""))
        return cls(
            assistant_header=header,
            assistant_marker=marker,
            end_of_turn_id=end_of_turn,
            end_after_tool_call_id=(_end_after_tool_call(tokenizer) if markup else None) or end_of_turn,
            markup=markup,
        )

    @property
    def stop_ids(self) -> set[int]:
        """Tokens that end a sampled turn (besides the tokenizer's EOS)."""
        return {self.end_of_turn_id, self.end_after_tool_call_id}

    def prior_assistant_turns(self, prompt_text: str) -> int:
        """How many assistant turns the conversation already holds (not counting the open one)."""
        count = prompt_text.count(self.assistant_marker)
        if self.assistant_marker in prompt_text[prompt_text.rstrip().rfind(self.assistant_header.strip()) :]:
            count -= 1
        return max(count, 0)

    def tools_offered(self, prompt_text: str) -> bool:
        """The prompt declares tools (so replies should be tool calls, not fenced bash)."""
        return self.markup is not None and TOOLS_MARKER in prompt_text


def new_tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    return str(rendered)


def _special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    added = {int(i) for i, token in decoder.items() if getattr(token, "special", False)}
    return set(tokenizer.all_special_ids) | added


def _first_special(tokenizer: PreTrainedTokenizerBase, text: str) -> int | None:
    special = _special_ids(tokenizer)
    for token_id in tokenizer.encode(text, add_special_tokens=False):
        if token_id in special:
            return int(token_id)
    return None


def _end_after_tool_call(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The first special token between a rendered tool call and the tool's result."""
    call: dict[str, Any] = {
        "type": "function",
        "id": "call_0",
        "function": {"name": _PROBE_TOOL, "arguments": {"x": "y"}},
    }
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": _PROBE_RESULT},
    ]
    try:
        text = _render(tokenizer, messages, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 - templates that cannot render tool calls have no such token
        return None
    # Scan from the end of the call markup (<arg_key> and friends may be special tokens).
    call_at = text.find(_PROBE_TOOL)
    start = text.find(CALL_CLOSE, call_at)
    end = text.find(_PROBE_RESULT, start)
    if call_at < 0 or start < 0 or end < 0:
        return None
    return _first_special(tokenizer, text[start + len(CALL_CLOSE) : end])
