"""Chat-template markers derived from real tokenizers, and tool-call markup render/parse."""

from __future__ import annotations

import pytest

from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server.chat_format import ChatFormat
from swerollout_dev.policy_server.tool_markup import (
    GLMMarkup,
    HermesMarkup,
    QwenXMLMarkup,
    ToolMarkup,
    parse_tool_calls,
)

USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "ok"}
# tokenizer -> (tool-call markup, token ending a text turn, token ending a tool-call turn)
FAMILIES = {
    "qwen-2.5": ("hermes", "<|im_end|>", "<|im_end|>"),
    "qwen-3": ("hermes", "<|im_end|>", "<|im_end|>"),
    "qwen-3.5": ("qwen-xml", "<|im_end|>", "<|im_end|>"),
    "glm-4.5v": ("glm", "<|user|>", "<|observation|>"),
    "deepseek-v3": (None, "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}


@pytest.mark.parametrize("name", FAMILIES)
def test_markers_from_the_template(name: str) -> None:
    markup, end_text, end_call = FAMILIES[name]
    tokenizer = load_tokenizer(name)
    chat = ChatFormat.from_tokenizer(tokenizer)
    assert (chat.markup.name if chat.markup else None) == markup
    assert tokenizer.convert_ids_to_tokens([chat.end_of_turn_id, chat.end_after_tool_call_id]) == [end_text, end_call]
    counts = [
        chat.prior_assistant_turns(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        for messages in ([USER], [USER, ASSISTANT, USER], [USER, ASSISTANT, USER, ASSISTANT, USER])
    ]
    assert counts == [0, 1, 2]


COMMAND = 'cat > f <<\'EOF\'\n{"a": 1} <x> & "q"\nEOF\ngit apply f'


@pytest.mark.parametrize("markup", [HermesMarkup(), GLMMarkup(), QwenXMLMarkup()], ids=lambda m: m.name)
def test_markup_round_trip_and_malformed_blocks(markup: ToolMarkup) -> None:
    text = "Let me look.\n" + markup.render("bash", {"command": COMMAND}) + "\n" + markup.render("submit", {})
    content, calls = parse_tool_calls(text, markup)
    assert content == "Let me look."
    assert [(c.name, c.arguments) for c in calls] == [("bash", {"command": COMMAND}), ("submit", {})]
    broken = "<tool_call>{not a call</tool_call>"
    content, calls = parse_tool_calls("before " + broken, markup)
    assert calls == [] and content == "before " + broken


def test_hermes_accepts_arguments_as_a_json_string() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "submit", "arguments": "{}"}</tool_call>', HermesMarkup())
    assert [(c.name, c.arguments) for c in calls] == [("submit", {})]
