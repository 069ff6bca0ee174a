"""Whether a tokenizer can spell ordinary text: the one rule the client (at submit) and the
runner (at setup) apply before a token is sent.

A vocabulary that lacks a character and has no byte fallback encodes it as its unknown
token (a special token), or drops it: the token list then matches the chat template but is
not the text the agent saw, and a trainer would train on it. No per-model list: every
character of ordinary ASCII text (letters, digits, punctuation, space, tab, newline) is
encoded between letters, alone and doubled, and must come back exactly with no special
token in between. Leading and trailing positions are not probed, because SentencePiece-style
pre-tokenizers legitimately re-space a text's edges.
"""

from __future__ import annotations

import functools
import string
import unicodedata
from typing import TYPE_CHECKING

from swerollout.tokenizers import TokenizerError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "ORDINARY_TEXT",
    "UnencodableTextError",
    "describe",
    "ordinary_text_problem",
    "require_ordinary_text",
    "unencodable_text",
]

ORDINARY_TEXT = string.ascii_letters + string.digits + string.punctuation + " \t\n"
"""The characters every tokenizer the runner accepts must encode exactly."""

_NAMES = {" ": "space", "\t": "tab", "\n": "newline"}


class UnencodableTextError(TokenizerError, ValueError):
    """The tokenizer cannot encode ordinary text exactly; retrying never helps (pick another tokenizer)."""


def describe(char: str) -> str:
    """``'\\n' (newline, U+000A)``: a character as an error message names it."""
    name = _NAMES.get(char) or unicodedata.name(char, "").lower() or "character"
    return f"{char!r} ({name}, U+{ord(char):04X})"


def unencodable_text(backend: Tokenizer) -> list[tuple[str, str]]:
    """Each ordinary character the tokenizer cannot encode exactly, with what became of it."""
    specials = {i: str(token.content) for i, token in backend.get_added_tokens_decoder().items() if token.special}
    bad: dict[str, str] = {}
    for char, probe in ((c, f"a{c * n}b") for c in ORDINARY_TEXT for n in (1, 2)):
        if char in bad:
            continue
        # One at a time: encode_batch would apply the tokenizer's padding, if it has any.
        encoding = backend.encode(probe, add_special_tokens=False)
        special = [specials[i] for i in encoding.ids if i in specials]
        if special:
            bad[char] = f"becomes the special token {special[0]!r}"
            continue
        back = backend.decode(encoding.ids, skip_special_tokens=False)
        if back != probe:
            bad[char] = f"does not round-trip ({probe!r} decodes as {back!r})"
    return [(c, bad[c]) for c in ORDINARY_TEXT if c in bad]


def _message(name: str, bad: list[tuple[str, str]]) -> str:
    first, how = bad[0]
    others = [describe(c) for c, _ in bad[1:4]] + ([f"{len(bad) - 4} more"] if len(bad) > 4 else [])
    more = f" (also {', '.join(others)})" if others else ""
    return (
        f"spec.inference.tokenizer {name!r} cannot encode ordinary text: {describe(first)} {how}{more}, so the "
        "token list would not be the text the agent saw; use a tokenizer whose vocabulary covers ASCII text "
        "(byte-level BPE or byte fallback, e.g. qwen-2.5)"
    )


def require_ordinary_text(backend: Tokenizer, name: str) -> None:
    """Raise UnencodableTextError naming the first ordinary character ``backend`` cannot encode."""
    bad = unencodable_text(backend)
    if bad:
        raise UnencodableTextError(_message(name, bad))


@functools.lru_cache(maxsize=64)
def ordinary_text_problem(name: str) -> str | None:
    """Why a tokenizer (bundled name or directory) cannot be used, or None; None also when it
    cannot be told here (the tokenizers package is missing, or the directory is one only the
    runner has: the runner checks again). Only the answer is cached."""
    try:
        from tokenizers import Tokenizer

        from swerollout.tokenizers import resolve_tokenizer_dir

        backend = Tokenizer.from_file(str(resolve_tokenizer_dir(name) / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - missing package, unknown name, unreadable file: the runner checks again
        return None
    bad = unencodable_text(backend)
    return _message(name, bad) if bad else None
