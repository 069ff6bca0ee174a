"""Chat templates rendered as transformers 5 renders them, without importing transformers.

A chat template is Jinja source from a model's tokenizer files; what it renders is only
exact if the environment around it is the one the model's own serving stack uses
(``tokenizer.apply_chat_template``). That environment is small and documented: a sandboxed,
immutable Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
extension and a ``{% generation %}`` block tag, a ``tojson`` filter that is ``json.dumps``
(no HTML escaping; ``indent``, ``separators``, ``sort_keys``, ``ensure_ascii`` accepted),
the globals ``raise_exception``, ``strftime_now``, ``dict`` and a ``namespace`` that refuses
underscore names, and the messages handed over with ``None``-valued keys dropped and the
reasoning copied under the names templates read it by. The named special tokens
(``bos_token``, ``eos_token``, ...) are template variables too.

tests/swerollout/test_runner_tokenizer.py holds every bundled template against
transformers' own ``apply_chat_template`` over tool, multi-turn and generation-prompt
conversations: a difference there is a bug here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

# transformers 5 copies a message's reasoning, whichever of these names holds it, under the
# first (what most templates read) and under "thinking" (gpt-oss templates).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (it marks assistant text
    for training masks, which the runner computes from its own token list instead)."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


class _Namespace(jinja2.utils.Namespace):
    """A template's ``namespace()``: no underscore attributes (no reaching into CPython)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Jinja's own signature trick
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template cannot set {name!r} on a namespace")


class _Dict:
    """A template's ``dict``: builds dicts, exposes nothing of the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_Dict(), namespace=_Namespace)
    return env.from_string(source)


def _plain(value: Any) -> Any:
    """JSON-shaped copies only: the template never holds the caller's objects."""
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: _plain(value) for key, value in message.items() if value is not None}
    reasoning = next((out[key] for key in _REASONING_FIELDS if out.get(key) is not None), None)
    if reasoning is not None:
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
    return out


def pick_template(templates: str | Mapping[str, str], *, with_tools: bool) -> str:
    """The template a tokenizer renders with: its only one, or of named ones ``tool_use``
    when tools are given and it has one, else ``default``."""
    if isinstance(templates, str):
        return templates
    if with_tools and "tool_use" in templates:
        return templates["tool_use"]
    if "default" in templates:
        return templates["default"]
    raise ValueError(f"the tokenizer has several chat templates and no default: {sorted(templates)}")


def render(
    source: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Any] | None,
    add_generation_prompt: bool,
    special_tokens: Mapping[str, str],
    **kwargs: Any,
) -> str:
    """``apply_chat_template(messages, tools=tools, tokenize=False, ...)`` of transformers 5."""
    if not messages:
        raise ValueError("cannot render an empty conversation")
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"chat messages must be dicts, got {type(message).__name__}")
    variables = {**special_tokens, **kwargs}
    return compile_template(source).render(
        messages=[_message(m) for m in messages],
        tools=_plain(list(tools)) if tools is not None else None,
        documents=None,
        add_generation_prompt=add_generation_prompt,
        **{k: _plain(v) for k, v in variables.items()},
    )
