"""Chat-template markers derived from real tokenizers, and Hermes tool-call parsing."""

from __future__ import annotations

import pytest

from swerollout.policy_server.chat_format import ChatFormat, parse_tool_calls
from swerollout.tokenizers import load_tokenizer

USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "ok"}
FAMILIES = {"qwen-2.5": True, "qwen-3": True, "glm-4.5v": False, "deepseek-v3": False}


@pytest.mark.parametrize(("name", "hermes"), FAMILIES.items())
def test_markers_from_the_template(name: str, hermes: bool) -> None:
    tokenizer = load_tokenizer(name)
    chat = ChatFormat.from_tokenizer(tokenizer)
    assert chat.hermes_tools is hermes
    assert chat.end_of_turn_id in set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if t.special
    }
    counts = [
        chat.prior_assistant_turns(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        for messages in ([USER], [USER, ASSISTANT, USER], [USER, ASSISTANT, USER, ASSISTANT, USER])
    ]
    assert counts == [0, 1, 2]


def test_qwen_end_of_turn_closes_an_assistant_message() -> None:
    tokenizer = load_tokenizer("qwen-2.5")
    chat = ChatFormat.from_tokenizer(tokenizer)
    rendered = tokenizer.apply_chat_template([USER, ASSISTANT], tokenize=False)
    assert "ok" + tokenizer.convert_ids_to_tokens(chat.end_of_turn_id) in rendered


def test_parse_tool_calls_keeps_malformed_blocks_in_content() -> None:
    text = (
        'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
        '<tool_call>{"name": "submit", "arguments": "{}"}</tool_call>'
        "<tool_call>{not json}</tool_call>"
    )
    content, calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("bash", {"command": "ls"}), ("submit", {})]
    assert content.startswith("Let me look.") and "<tool_call>{not json}</tool_call>" in content
    assert parse_tool_calls("plain answer") == ("plain answer", [])
