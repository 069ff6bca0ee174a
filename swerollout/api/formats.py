"""String formats core/v1 (and the tools behind it) accept, checked twice the same way.

Each format is one regular expression used by both halves: pydantic checks it
when the client builds an object, and the API server checks it as a CEL rule
(`self.matches(...)`) at `kubectl apply` time, with the same one-line message.
The expressions use only what RE2 (the API server) and Python's `re` both read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from .base import cel

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"^{_LABEL}(\.{_LABEL})*$"
"""Object names such as Secrets and RuntimeClasses (RFC 1123 subdomain, at most 253)."""
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^({_LABEL}(\.{_LABEL})*/)?{_NAME}$"
"""A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters."""
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"

_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*)"
_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
HTTP_URL = rf"^https?://{_HOST}(:{_PORT})?(/[^\s]*)?$"
"""An http(s) URL with a host and, if given, a port from 1 to 65535."""
SECRET_KEY = r"^[-._A-Za-z0-9]+$"
"""A key of a Secret's data (core/v1: `-`, `_`, `.` and alphanumerics, at most 253)."""
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""A shell variable name (the runner exports each as `export NAME=...`)."""
DATA_IMAGE_URL = r"^data:image/[a-z0-9.+-]+;base64,[A-Za-z0-9+/]*={0,2}$"

# The image reference grammar of the container runtimes (distribution/reference):
# [registry[:port]/]path[:tag][@digest]; the kubelet refuses anything else with
# InvalidImageName, so refusing it at apply time only moves the error earlier.
_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_DOMAIN = r"([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
IMAGE = rf"^(file:///[^\s]*|({_DOMAIN}/)?{_PATH}(/{_PATH})*(:{_TAG})?(@{_DIGEST})?)$"
"""A container image reference, or `file:///<git repository>` in the embedded dev mode."""


def is_http_url(value: str) -> bool:
    """An http(s) URL with a host and, if given, a port from 1 to 65535 (as CEL's url() reads it)."""
    if any(c.isspace() for c in value):
        return False
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and (port is None or port >= 1)


def cel_string(text: str) -> str:
    """A CEL raw string literal holding `text` (our expressions contain no single quote)."""
    assert "'" not in text
    return f"r'{text}'"


def matches(value: str, pattern: str) -> bool:
    """Whole-string match with RE2's reading of `$` (Python's also matches before a final newline)."""
    found = re.search(pattern, value)
    return found is not None and found.end() == len(value)


@dataclass(frozen=True)
class Rule:
    """One rule, checked by pydantic (`check`) and by the API server (`rule`, CEL on `self`).

    Use inside `Annotated[...]`; the message is what both sides print, after the field path.
    """

    rule: str
    message: str
    check: Callable[[Any], bool]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def validate(value: Any) -> Any:
            if not self.check(value):
                raise ValueError(self.message)
            return value

        return core_schema.no_info_after_validator_function(validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = dict(handler(schema))
        out["x-kubernetes-validations"] = [*out.get("x-kubernetes-validations", []), cel(self.rule, self.message)]
        return out


def pattern_rule(pattern: str, message: str) -> Rule:
    """A Rule that the whole string matches `pattern`."""
    return Rule(f"self.matches({cel_string(pattern)})", message, lambda v: matches(v, pattern))
