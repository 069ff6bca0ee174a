"""The operator's command-line flags, generated from OperatorSettings.

Each settings field is one flag with the same name in kebab case (`store_url` ->
`--store-url`), its docstring as help and its default shown, so the flags, the
settings and the chart's args cannot drift apart. Scalars take their type; lists
of names take a comma-separated list; structured fields (resources, tolerations,
nodeSelector) take JSON. Booleans are `--flag` / `--no-flag`.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from .settings import OperatorSettings


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _comma_list(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc


def _scalar(annotation: Any) -> Any:
    """The annotation without `| None`."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _converter(annotation: Any) -> tuple[Callable[[str], Any], str]:
    """How a flag's text becomes the field's value, and its metavar."""
    kind = _scalar(annotation)
    if kind in (int, float, str):
        return kind, kind.__name__.upper()
    if kind is Path:
        return Path, "PATH"
    if typing.get_origin(kind) is list and typing.get_args(kind) == (str,):
        return _comma_list, "A,B,..."
    return _json, "JSON"


def _help(field: FieldInfo) -> str:
    text = " ".join((field.description or "").split())
    default = field.get_default(call_default_factory=True)
    if default not in (None, [], {}):
        shown = json.dumps(default) if isinstance(default, (dict, list)) else str(default)
        text += f" (default: {shown})"
    return text.replace("%", "%%")


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for name, field in OperatorSettings.model_fields.items():
        flag = flag_name(name)
        if _scalar(field.annotation) is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=_help(field))
        else:
            convert, metavar = _converter(field.annotation)
            parser.add_argument(flag, dest=name, type=convert, metavar=metavar, default=None, help=_help(field))


def settings_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> OperatorSettings:
    """The settings the flags give; a bad value exits with one line naming the flag."""
    values = {name: getattr(args, name) for name in OperatorSettings.model_fields if getattr(args, name) is not None}
    try:
        return OperatorSettings.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = flag_name(str(error["loc"][0])) if error["loc"] else "flags"
        parser.error(f"{where}: {str(error['msg']).removeprefix('Value error, ')}")
        raise  # parser.error exits; this line only satisfies type checkers
