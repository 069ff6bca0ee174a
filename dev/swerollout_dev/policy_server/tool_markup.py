"""Tool-call markup of the template families the server can speak: render and parse.

Chosen from markers in the chat template (never from a model name), in this order:
- ``glm`` (GLM-4.5+): ``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>``
- ``qwen-xml`` (Qwen3.5 / Qwen3-Coder): ``<tool_call><function=name><parameter=k>v</parameter></function></tool_call>``
- ``hermes`` (Qwen2.5 / Qwen3 / QwQ): ``<tool_call>{"name": .., "arguments": {..}}</tool_call>``
All three declare the offered tools inside ``<tools>`` in the prompt. Other
templates (e.g. DeepSeek's, which do not render tools) get no markup: the
scripted policies then answer in the text format (one fenced bash block).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

TOOLS_MARKER = "<tools>"
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


@dataclass(frozen=True)
class ParsedToolCall:
    name: str
    arguments: dict[str, Any]


class ToolMarkup(Protocol):
    name: str

    def render(self, tool: str, arguments: dict[str, Any]) -> str: ...

    def parse_call(self, body: str) -> ParsedToolCall | None:
        """One call from the text between <tool_call> and </tool_call>; None if malformed."""
        ...


def _text(value: Any) -> str:
    # Templates print non-string argument values as JSON; strings stay raw.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _value(raw: str) -> Any:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw
    return parsed if not isinstance(parsed, str) else raw


class HermesMarkup:
    name = "hermes"

    def render(self, tool: str, arguments: dict[str, Any]) -> str:
        payload = json.dumps({"name": tool, "arguments": arguments}, ensure_ascii=False)
        return f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}"

    def parse_call(self, body: str) -> ParsedToolCall | None:
        try:
            payload = json.loads(body)
            name, arguments = payload["name"], payload.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            return None
        return ParsedToolCall(name=name, arguments=arguments)


_TOOL_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


class GLMMarkup:
    name = "glm"

    def render(self, tool: str, arguments: dict[str, Any]) -> str:
        pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_text(v)}</arg_value>\n" for k, v in arguments.items())
        return f"{CALL_OPEN}{tool}\n{pairs}{CALL_CLOSE}"

    def parse_call(self, body: str) -> ParsedToolCall | None:
        cut = body.find("<arg_key>")
        name = (body if cut < 0 else body[:cut]).strip()
        rest = "" if cut < 0 else body[cut:]
        if not _TOOL_NAME.fullmatch(name) or _GLM_PAIR.sub("", rest).strip():
            return None
        return ParsedToolCall(name=name, arguments={k.strip(): _value(v) for k, v in _GLM_PAIR.findall(rest)})


_XML_FUNCTION = re.compile(r"^\s*<function=([^>\s]+)>(.*)</function>\s*$", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)


class QwenXMLMarkup:
    name = "qwen-xml"

    def render(self, tool: str, arguments: dict[str, Any]) -> str:
        params = "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in arguments.items())
        return f"{CALL_OPEN}\n<function={tool}>\n{params}</function>\n{CALL_CLOSE}"

    def parse_call(self, body: str) -> ParsedToolCall | None:
        match = _XML_FUNCTION.match(body)
        if match is None or _XML_PARAM.sub("", match.group(2)).strip():
            return None
        return ParsedToolCall(
            name=match.group(1), arguments={k: _value(v) for k, v in _XML_PARAM.findall(match.group(2))}
        )


def detect_markup(chat_template: str) -> ToolMarkup | None:
    if CALL_OPEN not in chat_template or TOOLS_MARKER not in chat_template:
        return None
    if "<arg_key>" in chat_template:
        return GLMMarkup()
    if "<function=" in chat_template and "<parameter=" in chat_template:
        return QwenXMLMarkup()
    return HermesMarkup()


def parse_tool_calls(text: str, markup: ToolMarkup) -> tuple[str, list[ParsedToolCall]]:
    """Split a reply into its plain content and its tool calls.

    A block that does not parse stays in the content, so the caller sees the
    model's malformed output instead of losing it.
    """
    calls: list[ParsedToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _CALL.finditer(text):
        call = markup.parse_call(match.group(1))
        if call is None:
            continue
        kept.append(text[position : match.start()])
        position = match.end()
        calls.append(call)
    kept.append(text[position:])
    return "".join(kept).strip(), calls
