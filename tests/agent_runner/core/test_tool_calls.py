"""Tool-call parsing per family: markup rendered by each family's own chat template."""

from __future__ import annotations

import json
from typing import Any

import jinja2
import pytest

from agent_runner.policy.chat_template import ChatTemplate
from agent_runner.policy.tool_calls import BashFormatError, ToolCallParser, detect_parser, parse_bash_block
from swerollout.tokenizers import load_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "edit",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "line": {"type": "integer"}, "text": {"type": "string"}},
            },
        },
    }
]


@pytest.mark.parametrize(
    ("tokenizer", "expected"),
    [
        ("qwen-2.5", "hermes"),
        ("qwen-3", "hermes"),
        ("qwen-3.5", "qwen-xml"),
        ("glm-4.5v", "glm"),
        ("glm-4.7-flash", "glm"),
        ("deepseek-v3", "deepseek-v3"),
        ("deepseek-v3.1", "deepseek-v3.1"),
        ("deepseek-v3.2", None),
    ],
)
def test_parser_is_chosen_from_template_markers(tokenizer: str, expected: str | None) -> None:
    assert detect_parser(load_tokenizer(tokenizer).chat_template) == expected


def _rendered_reply(tokenizer: str, args: dict[str, Any], args_as_text: bool) -> str:
    """The assistant text the family's template renders for two tool calls."""
    template = ChatTemplate(load_tokenizer(tokenizer), tools=TOOLS)
    history = [{"role": "user", "content": "go"}]
    arguments: Any = json.dumps(args) if args_as_text else args
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "edit", "arguments": arguments}} for i in range(2)
    ]
    # DeepSeek V3's template renders tool calls only for content None.
    content = None if tokenizer == "deepseek-v3" else "I will edit."
    assistant = {"role": "assistant", "content": content, "tool_calls": calls}
    if content is None:
        # transformers drops None content, which V3's template tests with `is none`;
        # render that template with plain jinja2 instead.
        source = jinja2.Environment().from_string(template.source)
        after = source.render(messages=[*history, assistant], bos_token="", add_generation_prompt=False)
        return after[after.index("<｜tool▁calls▁begin｜>") :]
    before = template.render(history, add_generation_prompt=True)
    after = template.render([*history, assistant], add_generation_prompt=False)
    return after[len(before) :]


@pytest.mark.parametrize(
    ("tokenizer", "args_as_text"),
    [
        ("qwen-2.5", False),
        ("qwen-3.5", False),
        ("glm-4.5v", False),
        ("glm-4.7-flash", False),
        ("deepseek-v3", True),
        ("deepseek-v3.1", True),
    ],
)
def test_each_family_parses_its_own_rendering(tokenizer: str, args_as_text: bool) -> None:
    args = {"path": "src/a b.py", "line": 12, "text": "x = {'k': [1, 2]}\n<tag>"}
    text = _rendered_reply(tokenizer, args, args_as_text)
    for stop in ("<|im_end|>", "<｜end▁of▁sentence｜>"):
        text = text.split(stop)[0]
    parser = ToolCallParser(detect_parser(load_tokenizer(tokenizer).chat_template) or "", TOOLS)
    reply = parser.parse(text, id_prefix="t3")
    assert reply.error is None, reply.error
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("t3_0", "edit", args), ("t3_1", "edit", args)]
    assert reply.content.strip().endswith("I will edit.") or (tokenizer == "deepseek-v3" and not reply.content)


def test_no_tool_call_is_plain_content() -> None:
    reply = ToolCallParser("hermes").parse("Just thinking aloud.")
    assert (reply.content, reply.tool_calls, reply.error) == ("Just thinking aloud.", [], None)


@pytest.mark.parametrize(
    ("parser", "text", "message"),
    [
        ("hermes", '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n', "never closed"),
        ("hermes", "<tool_call>\n{name: bash}\n</tool_call>", "not valid JSON"),
        ("hermes", '<tool_call>\n{"arguments": {}}\n</tool_call>', '"name"'),
        ("hermes", '<tool_call>\n{"name": "bash", "arguments": [1]}\n</tool_call>', "JSON object"),
        ("hermes", "ok</tool_call>", "without an opening"),
        ("hermes", '<tool_call>{"name": "a"}</tool_call> trailing words', "unexpected text"),
        ("glm", "<tool_call><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>", "no function name"),
        ("glm", "<tool_call>bash<arg_key>command</arg_key>ls</tool_call>", "unbalanced"),
        ("qwen-xml", "<tool_call>\n<parameter=x>1</parameter>\n</tool_call>", "<function=name>"),
        (
            "deepseek-v3.1",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{bad<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "not valid JSON",
        ),
        (
            "deepseek-v3.1",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "name<｜tool▁sep｜>",
        ),
        (
            "deepseek-v3",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "```json",
        ),
        ("deepseek-v3", "<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜>", "malformed"),
    ],
)
def test_malformed_markup_is_a_parse_error(parser: str, text: str, message: str) -> None:
    reply = ToolCallParser(parser).parse(text)
    assert reply.tool_calls == []
    assert reply.error is not None and message in reply.error
    assert reply.content == text


def test_declared_string_parameter_stays_text() -> None:
    text = "<tool_call>edit<arg_key>path</arg_key><arg_value>123</arg_value><arg_key>line</arg_key><arg_value>7</arg_value></tool_call>"
    reply = ToolCallParser("glm", TOOLS).parse(text)
    assert reply.tool_calls[0].arguments == {"path": "123", "line": 7}


def test_unknown_parser_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="hermes"):
        ToolCallParser("nope")


def test_bash_block_exactly_one() -> None:
    assert parse_bash_block("I will look.\n```bash\nls -la\ncat x\n```\n") == "ls -la\ncat x"
    with pytest.raises(BashFormatError, match="found 0"):
        parse_bash_block("no code here ```python\nprint()\n```")
    with pytest.raises(BashFormatError, match="found 2"):
        parse_bash_block("```bash\nls\n```\nthen\n```bash\npwd\n```")


def test_markup_quoted_in_reasoning_is_not_a_call() -> None:
    text = (
        "<think>\nI could emit <tool_call> here, but first let me think.\n</think>\n\n"
        'Listing files.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    )
    reply = ToolCallParser("hermes").parse(text)
    assert reply.error is None and [c.arguments for c in reply.tool_calls] == [{"command": "ls"}]
    assert reply.content.startswith("<think>") and reply.content.endswith("Listing files.")


@pytest.mark.parametrize(
    ("tokenizer", "tags"), [("minimax-m3", ("<mm:think>", "</mm:think>")), ("qwen-3.5", ("<think>", "</think>"))]
)
def test_reasoning_ends_at_the_templates_own_tag(tokenizer: str, tags: tuple[str, str]) -> None:
    """Markup quoted in reasoning is not a call, whatever tag the family closes reasoning with."""
    template = ChatTemplate(load_tokenizer(tokenizer), tools=TOOLS)
    opening, closing = tags
    assert template.reasoning_ends == (closing,) and set(template.reasoning_tags) == set(tags)
    # The template's text for the turn, without its end-of-turn token and any rendered reasoning.
    quoted, real = (
        _rendered_reply(tokenizer, {"path": path}, False).split(closing)[-1].split(str(template.tokenizer.eos_token))[0]
        for path in ("quoted", "real")
    )
    text = f"{opening}I could emit {quoted} but first I think.{closing}{real}"
    parser = ToolCallParser(detect_parser(template.source) or "", TOOLS, reasoning_ends=template.reasoning_ends)
    reply = parser.parse(text, id_prefix="t")
    assert reply.error is None, reply.error
    assert [c.arguments for c in reply.tool_calls] == [{"path": "real"}, {"path": "real"}]
    assert reply.content.startswith(f"{opening}I could emit") and reply.content.strip().endswith("I will edit.")
