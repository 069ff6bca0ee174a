"""What the server needs to know about a tokenizer's chat template, derived from the template.

Nothing here names a model family: the assistant-turn header and the end-of-turn
token come from rendering probe conversations with the tokenizer's own template,
and the tool-call markup is recognised by the markers the template itself
prints. Only the Qwen/Hermes tool-call markup (``<tool_call>{json}</tool_call>``)
is implemented; a template without it is treated as text-only (fenced bash).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_PROBE_USER = "swerollout-probe-user"
_PROBE_REPLY = "swerollout-probe-reply"

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
HERMES_TOOLS_MARKER = "<tools>"
_HERMES_CALL = re.compile(re.escape(HERMES_OPEN) + r"\s*(.*?)\s*" + re.escape(HERMES_CLOSE), re.S)


@dataclass(frozen=True)
class ParsedToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ChatFormat:
    """Markers of one tokenizer's chat template."""

    assistant_header: str
    """The template's generation prompt (opens the assistant turn to be sampled)."""
    assistant_marker: str
    """Text that starts every assistant turn, in the history and in the open turn."""
    end_of_turn_id: int
    """Token that closes an assistant turn (e.g. Qwen's <|im_end|>)."""
    hermes_tools: bool
    """The template renders tools and tool calls with Hermes markup."""

    @classmethod
    def from_tokenizer(cls, tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
        user = [{"role": "user", "content": _PROBE_USER}]
        without = _render(tokenizer, user, add_generation_prompt=False)
        with_prompt = _render(tokenizer, user, add_generation_prompt=True)
        header = with_prompt[len(without):] if with_prompt.startswith(without) else ""
        if not header.strip():
            raise ValueError("the chat template adds no assistant header for add_generation_prompt")
        # The header of a turn in the history can differ from the generation prompt
        # (e.g. an opening <think> only on the open turn): count their common prefix.
        history = _render(
            tokenizer,
            [*user, {"role": "assistant", "content": _PROBE_REPLY}, {"role": "user", "content": _PROBE_USER}],
            add_generation_prompt=False,
        )
        before_reply = history[: history.find(_PROBE_REPLY)]
        marker = os.path.commonprefix([header, before_reply[len(without):]]).strip() or header.strip()
        template = str(getattr(tokenizer, "chat_template", "") or "")
        return cls(
            assistant_header=header,
            assistant_marker=marker,
            end_of_turn_id=_end_of_turn_id(tokenizer),
            # GLM-4.5+ also prints <tool_call> but with <arg_key> markup, not Hermes JSON.
            hermes_tools=HERMES_OPEN in template and HERMES_TOOLS_MARKER in template and "<arg_key>" not in template,
        )

    def prior_assistant_turns(self, prompt_text: str) -> int:
        """How many assistant turns the conversation already holds (not counting the open one)."""
        count = prompt_text.count(self.assistant_marker)
        if self.assistant_marker in prompt_text[prompt_text.rstrip().rfind(self.assistant_header.strip()):]:
            count -= 1
        return max(count, 0)

    def tools_offered(self, prompt_text: str) -> bool:
        """The prompt declares tools (so replies should be tool calls, not fenced bash)."""
        return self.hermes_tools and HERMES_TOOLS_MARKER in prompt_text

    def render_tool_call(self, name: str, arguments: dict[str, Any]) -> str:
        payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"{HERMES_OPEN}\n{payload}\n{HERMES_CLOSE}"


def parse_tool_calls(text: str) -> tuple[str, list[ParsedToolCall]]:
    """Split a reply into its plain content and its Hermes tool calls.

    A block whose JSON does not parse stays in the content, so the caller sees
    the model's malformed output instead of losing it.
    """
    calls: list[ParsedToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _HERMES_CALL.finditer(text):
        try:
            payload = json.loads(match.group(1))
            name = payload["name"]
            arguments = payload.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise TypeError("name must be a string and arguments an object")
        except (ValueError, KeyError, TypeError):
            continue
        kept.append(text[position:match.start()])
        position = match.end()
        calls.append(ParsedToolCall(name=name, arguments=arguments))
    kept.append(text[position:])
    return "".join(kept).strip(), calls


def new_tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    return str(rendered)


def _end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The first special token the template emits after an assistant reply's content."""
    conversation = [
        {"role": "user", "content": _PROBE_USER},
        {"role": "assistant", "content": _PROBE_REPLY},
    ]
    text = _render(tokenizer, conversation, add_generation_prompt=False)
    tail = text[text.rfind(_PROBE_REPLY) + len(_PROBE_REPLY):]
    special = set(tokenizer.all_special_ids) | set(_added_token_ids(tokenizer))
    for token_id in tokenizer.encode(tail, add_special_tokens=False):
        if token_id in special:
            return int(token_id)
    if tokenizer.eos_token_id is None:
        raise ValueError("cannot find the end-of-turn token: the template emits none and there is no EOS")
    return int(tokenizer.eos_token_id)


def _added_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return [int(i) for i, token in decoder.items() if getattr(token, "special", False)]
