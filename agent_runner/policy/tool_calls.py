"""Parse the model's tool calls from its decoded reply, in the model family's own markup.

The parser is chosen from markers in the tokenizer's chat template (what the model
was trained to emit), never from a model name:

- ``hermes``: Qwen2.5/Qwen3/QwQ ``<tool_call>{"name": .., "arguments": {..}}</tool_call>``
- ``qwen-xml``: Qwen3-Coder/Qwen3.5 ``<tool_call><function=name><parameter=k>v</parameter></function></tool_call>``
- ``glm``: GLM-4.5+ ``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>``
- ``deepseek-v3``: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name\\n```json\\n{..}\\n```<｜tool▁call▁end｜>``
- ``deepseek-v3.1``: ``<｜tool▁call▁begin｜>name<｜tool▁sep｜>{..}<｜tool▁call▁end｜>``
- ``minimax-xml``: MiniMax-M3 ``NS<tool_call>\nNS<invoke name="name">NS<k>vNS</k>NS</invoke>\nNS</tool_call>``
  with ``NS`` = ``]<]minimax[>[`` (nested objects and lists as ``NS<key>``/``NS<item>`` elements)

Malformed markup never raises: the reply comes back with ``error`` set (the agent
loop turns it into a format-error observation, SWE-agent's ``exit_format`` path).

``parse_bash_block`` is the text action format of TextBashAgent (mini-swe-agent
style): exactly one fenced ```bash block per reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_runner.policy.model import ToolCall

ParserName = str


@dataclass
class ParsedReply:
    content: str
    """The reply without tool-call markup (reasoning included if the model emitted it)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


_DS_BEGIN, _DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁call▁end｜>", re.S)
_DS_SEP = "<｜tool▁sep｜>"


def detect_parser(chat_template: str | None) -> ParserName | None:
    """The tool-call markup a chat template teaches, or None if it teaches none."""
    source = chat_template or ""
    if _MM_NS in source and "<invoke name=" in source:
        return "minimax-xml"
    if _DS_SEP in source:
        return "deepseek-v3" if "```json" in source else "deepseek-v3.1"
    if "<arg_key>" in source:
        return "glm"
    if "<function=" in source and "<parameter=" in source:
        return "qwen-xml"
    if "<tool_call>" in source:
        return "hermes"
    return None


class ToolCallParser:
    """Parse replies of one markup family; ``tools`` (OpenAI schemas) type the arguments."""

    def __init__(
        self,
        name: ParserName,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        reasoning_ends: Sequence[str] = ("</think>",),
    ) -> None:
        """``reasoning_ends``: the tags that close reasoning in this family's replies, from its
        chat template (``ChatTemplate.reasoning_ends``: ``</think>``, MiniMax-M3's ``</mm:think>``)."""
        if name not in _PARSERS:
            raise ValueError(f"unknown tool-call parser {name!r}; valid: {', '.join(sorted(_PARSERS))}")
        self.name = name
        self._parse = _PARSERS[name]
        self._reasoning_ends = tuple(sorted((t for t in reasoning_ends if t), key=len, reverse=True))
        self._string_params: dict[str, set[str]] = {}
        for tool in tools or []:
            fn = tool.get("function", tool)
            props = (fn.get("parameters") or {}).get("properties") or {}
            self._string_params[str(fn.get("name"))] = {k for k, v in props.items() if v.get("type") == "string"}

    def parse(self, text: str, *, id_prefix: str = "call") -> ParsedReply:
        """Parse ``text``; markup in it escaped with ``escape_markup`` is text, not markup."""
        # Reasoning may quote tool-call markup ("I could use <tool_call>..."); only the
        # text after the last reasoning-closing tag holds real calls.
        thought, closed, answer = self._split_reasoning(text)
        reply = self._parse(answer if closed else text, self._string_params)
        if closed:
            reply.content = thought + closed + reply.content if reply.error is None else text
        if reply.error is None and not reply.tool_calls:
            # A reply without calls is all content: its trailing whitespace is what the policy
            # sampled, not the separator a template puts before call markup (kept for the
            # template to render or trim, as it does a text reply).
            reply.content = text
        for index, call in enumerate(reply.tool_calls):
            call.id = f"{id_prefix}_{index}"
            call.arguments = _unescape_value(call.arguments)
        reply.content = unescape_markup(reply.content)
        if reply.error is not None:
            reply.error = unescape_markup(reply.error)
        return reply

    def _split_reasoning(self, text: str) -> tuple[str, str, str]:
        """(reasoning, closing tag, answer) at the last closing tag; ("", "", text) without one."""
        at, tag = max(((text.rfind(t), t) for t in self._reasoning_ends), default=(-1, ""))
        if at < 0:
            return "", "", text
        return text[:at], tag, text[at + len(tag) :]


# Inserted after the first character of markup text the policy sampled as ordinary
# tokens (a `grep "</tool_call>"` argument), so the parser does not take it for markup.
_ESCAPE = "\ue000"


def escape_markup(text: str, markup: Sequence[str]) -> str:
    """``text`` (decoded from non-markup tokens) with every occurrence of ``markup`` defused."""
    text = text.replace(_ESCAPE, "")  # the escape character itself never survives as content
    for mark in sorted(markup, key=len, reverse=True):
        if len(mark) > 1 and mark in text:
            text = text.replace(mark, mark[0] + _ESCAPE + mark[1:])
    return text


def unescape_markup(text: str) -> str:
    return text.replace(_ESCAPE, "")


def _unescape_value(value: Any) -> Any:
    if isinstance(value, str):
        return unescape_markup(value)
    if isinstance(value, dict):
        return {unescape_markup(k): _unescape_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unescape_value(v) for v in value]
    return value


def _call(name: str, arguments: Any) -> ToolCall:
    if not isinstance(arguments, dict):
        raise _Malformed(f"arguments of {name!r} must be a JSON object, got {type(arguments).__name__}")
    return ToolCall(id="", name=name, arguments=arguments)


class _Malformed(ValueError):
    pass


def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[str, list[str]]:
    """Content before the first block, and the bodies of all blocks; raise on bad nesting."""
    first = text.find(open_tag)
    if first < 0:
        if close_tag in text:
            raise _Malformed(f"found {close_tag} without an opening {open_tag}")
        return text, []
    content, rest, bodies = text[:first], text[first:], []
    while rest:
        rest = rest.lstrip()
        if not rest:
            break
        if not rest.startswith(open_tag):
            raise _Malformed(f"unexpected text after a tool call: {rest[:60]!r}")
        end = rest.find(close_tag)
        if end < 0:
            raise _Malformed(f"{open_tag} is never closed with {close_tag}")
        body = rest[len(open_tag) : end]
        if open_tag in body:
            raise _Malformed(f"{open_tag} opened again before {close_tag}")
        bodies.append(body)
        rest = rest[end + len(close_tag) :]
    return content, bodies


def _guard(
    parse: Callable[[str, dict[str, set[str]]], ParsedReply],
) -> Callable[[str, dict[str, set[str]]], ParsedReply]:
    def wrapped(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
        try:
            return parse(text, string_params)
        except _Malformed as exc:
            return ParsedReply(content=text, error=str(exc))

    return wrapped


@_guard
def _parse_hermes(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
    content, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for body in bodies:
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise _Malformed(
                f"tool call is not valid JSON ({exc.msg} at char {exc.pos}): {body.strip()[:80]!r}"
            ) from exc
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
            raise _Malformed(f'tool call needs {{"name": ..., "arguments": {{...}}}}, got {body.strip()[:80]!r}')
        arguments = data.get("arguments", data.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise _Malformed(f"arguments of {data['name']!r} are a string that is not JSON") from exc
        calls.append(_call(data["name"], arguments))
    return ParsedReply(content=content.rstrip(), tool_calls=calls)


def _typed(name: str, key: str, raw: str, string_params: dict[str, set[str]]) -> Any:
    # Templates render non-string values with tojson; a declared string stays text.
    if key in string_params.get(name, set()):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


@_guard
def _parse_glm(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
    content, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for body in bodies:
        cut = body.find("<arg_key>")
        name = (body if cut < 0 else body[:cut]).strip()
        if not name or "<" in name:
            raise _Malformed(f"tool call has no function name: {body.strip()[:80]!r}")
        args_text = "" if cut < 0 else body[cut:]
        pairs = _GLM_PAIR.findall(args_text)
        leftover = _GLM_PAIR.sub("", args_text).strip()
        if leftover:
            raise _Malformed(f"unbalanced <arg_key>/<arg_value> in call to {name!r}: {leftover[:60]!r}")
        calls.append(_call(name, {k.strip(): _typed(name, k.strip(), v, string_params) for k, v in pairs}))
    return ParsedReply(content=content.rstrip(), tool_calls=calls)


_XML_FUNCTION = re.compile(r"^\s*<function=([^>\s]+)>(.*)</function>\s*$", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)


@_guard
def _parse_qwen_xml(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
    content, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for body in bodies:
        match = _XML_FUNCTION.match(body)
        if not match:
            raise _Malformed(f"tool call needs <function=name>...</function>: {body.strip()[:80]!r}")
        name, inner = match.group(1), match.group(2)
        if _XML_PARAM.sub("", inner).strip():
            raise _Malformed(f"unbalanced <parameter=...> in call to {name!r}")
        calls.append(_call(name, {k: _typed(name, k, v, string_params) for k, v in _XML_PARAM.findall(inner)}))
    return ParsedReply(content=content.rstrip(), tool_calls=calls)


def _deepseek(text: str, split_call: Callable[[str], tuple[str, str]]) -> ParsedReply:
    content, bodies = _blocks(text, _DS_BEGIN, _DS_END)
    if len(bodies) > 1:
        raise _Malformed("more than one tool-calls section")
    calls = []
    for section in bodies:
        found = _DS_CALL.findall(section)
        if not found or _DS_CALL.sub("", section).strip():
            raise _Malformed(f"malformed tool-calls section: {section[:80]!r}")
        for body in found:
            name, raw = split_call(body)
            try:
                arguments = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise _Malformed(f"arguments of {name!r} are not valid JSON ({exc.msg})") from exc
            calls.append(_call(name, arguments))
    return ParsedReply(content=content.rstrip(), tool_calls=calls)


def _split_v3(body: str) -> tuple[str, str]:
    kind, sep, rest = body.partition(_DS_SEP)
    if not sep:
        raise _Malformed(f"tool call without {_DS_SEP}")
    name, newline, fenced = rest.partition("\n")
    fence = re.fullmatch(r"\s*```json\s*\n(.*?)\n?```\s*", fenced, re.S)
    if not name.strip() or not newline or not fence:
        raise _Malformed(f"tool call needs name and a ```json block: {body[:80]!r}")
    return name.strip(), fence.group(1)


def _split_v31(body: str) -> tuple[str, str]:
    name, sep, raw = body.partition(_DS_SEP)
    if not sep or not name.strip():
        raise _Malformed(f"tool call needs name{_DS_SEP}arguments: {body[:80]!r}")
    return name.strip(), raw


@_guard
def _parse_deepseek_v3(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
    return _deepseek(text, _split_v3)


@_guard
def _parse_deepseek_v31(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
    return _deepseek(text, _split_v31)


_MM_NS = "]<]minimax[>["
_MM_INVOKE = re.compile(re.escape(_MM_NS) + r'<invoke name="([^"]+)">(.*?)' + re.escape(_MM_NS) + r"</invoke>\n?", re.S)
_MM_ELEMENT = re.compile(re.escape(_MM_NS) + r"<([^<>/\s]+)>(.*?)" + re.escape(_MM_NS) + r"</\1>", re.S)


def _mm_elements(text: str) -> list[tuple[str, str]] | None:
    """The top-level ``NS<k>..NS</k>`` elements of ``text``; None if it is a scalar."""
    if not text.startswith(_MM_NS + "<"):
        return None
    found, at = [], 0
    while at < len(text):
        match = _MM_ELEMENT.match(text, at)
        if match is None:
            raise _Malformed(f"unbalanced {_MM_NS} elements: {text[at : at + 60]!r}")
        # The lazy match may stop at an inner element of the same name: extend to balance.
        end, depth = match.end(), text.count(f"{_MM_NS}<{match.group(1)}>", match.start() + 1, match.end())
        while depth:
            close = text.find(f"{_MM_NS}</{match.group(1)}>", end)
            if close < 0:
                raise _Malformed(f"{_MM_NS}<{match.group(1)}> is never closed")
            depth += text.count(f"{_MM_NS}<{match.group(1)}>", end, close) - 1
            end = close + len(f"{_MM_NS}</{match.group(1)}>")
        inner = text[
            match.start() + len(_MM_NS) + len(match.group(1)) + 2 : end - len(_MM_NS) - len(match.group(1)) - 3
        ]
        found.append((match.group(1), inner))
        at = end
    return found


def _mm_value(text: str) -> Any:
    elements = _mm_elements(text)
    if elements is None:
        return text
    if all(key == "item" for key, _ in elements):
        return [_mm_value(inner) for _, inner in elements]
    return {key: _mm_value(inner) for key, inner in elements}


@_guard
def _parse_minimax_xml(text: str, string_params: dict[str, set[str]]) -> ParsedReply:
    content, bodies = _blocks(text, _MM_NS + "<tool_call>", _MM_NS + "</tool_call>")
    calls = []
    for body in bodies:
        body = body.strip("\n")
        invokes = list(_MM_INVOKE.finditer(body))
        if not invokes or _MM_INVOKE.sub("", body).strip():
            raise _Malformed(f"tool call needs {_MM_NS}<invoke name=...>...{_MM_NS}</invoke>: {body[:80]!r}")
        for invoke in invokes:
            name, elements = invoke.group(1), _mm_elements(invoke.group(2)) or []
            arguments = {}
            for key, inner in elements:
                value = _mm_value(inner)
                arguments[key] = _typed(name, key, value, string_params) if isinstance(value, str) else value
            calls.append(_call(name, arguments))
    return ParsedReply(content=content.rstrip(), tool_calls=calls)


_PARSERS: dict[str, Callable[[str, dict[str, set[str]]], ParsedReply]] = {
    "minimax-xml": _parse_minimax_xml,
    "hermes": _parse_hermes,
    "qwen-xml": _parse_qwen_xml,
    "glm": _parse_glm,
    "deepseek-v3": _parse_deepseek_v3,
    "deepseek-v3.1": _parse_deepseek_v31,
}


# --- the text action format (TextBashAgent) ----------------------------------------------

_BASH_BLOCK = re.compile(r"```bash[ \t]*\n(.*?)\n?```", re.S)


class BashFormatError(ValueError):
    """The reply does not hold exactly one ```bash block (tell the model and let it retry)."""


def parse_bash_block(text: str) -> str:
    """The command of the reply's single fenced ```bash block."""
    blocks = _BASH_BLOCK.findall(text)
    if len(blocks) != 1:
        raise BashFormatError(
            f"expected exactly one ```bash code block in the reply, found {len(blocks)}; "
            "reply with your reasoning and one ```bash block holding one command"
        )
    return str(blocks[0]).strip()
