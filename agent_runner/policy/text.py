"""Text entering the agent: every string the token list or a JSON record will hold.

Content can hold code points no encoder accepts: lone surrogates from a JSON problem
statement (``"\\ud800"``) or from bytes decoded with ``surrogateescape``. They would
end the run at the first encode, so each is replaced with U+FFFD here, once, where
text enters, and the replacements are counted (the trajectory reports them).
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
# UTF-8 cannot encode surrogates (U+D800..U+DFFF); every other code point encodes.
_UNENCODABLE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> tuple[str, int]:
    """``text`` with unencodable code points replaced, and how many were replaced."""
    return _UNENCODABLE.subn(REPLACEMENT, text)


def clean_value(value: Any) -> tuple[Any, int]:
    """Every string inside a JSON-like value cleaned (keys included); the replacement count."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        total, out = 0, {}
        for key, item in value.items():
            new_key, n_key = clean_value(key) if isinstance(key, str) else (key, 0)
            new_item, n_item = clean_value(item)
            out[new_key] = new_item
            total += n_key + n_item
        return out, total
    if isinstance(value, list | tuple):
        total, items = 0, []
        for item in value:
            new_item, n = clean_value(item)
            items.append(new_item)
            total += n
        return items, total
    return value, 0
