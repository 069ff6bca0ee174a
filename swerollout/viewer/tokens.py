"""Per-token text: each id decoded on its own with the rollout's tokenizer.

A token that holds part of a multi-byte character decodes to U+FFFD on its own;
that is the truth about that token, so it is shown as is."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from tokenizers import Tokenizer

from swerollout.tokenizers import TokenizerError, resolve_tokenizer_dir


class TokenDecoder:
    """Decodes ids one at a time, each distinct id once."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def pieces(self, ids: Sequence[int]) -> list[str]:
        cache, out = self._cache, []
        for token_id in ids:
            piece = cache.get(token_id)
            if piece is None:
                piece = cache[token_id] = self._tokenizer.decode([token_id], skip_special_tokens=False)
            out.append(piece)
        return out


@functools.lru_cache(maxsize=8)
def decoder_for(name: str) -> TokenDecoder:
    """The decoder of a bundled tokenizer name or a tokenizer directory.

    Raises TokenizerError (with the fix) when it cannot be loaded."""
    directory = resolve_tokenizer_dir(name)
    try:
        return TokenDecoder(Tokenizer.from_file(str(directory / "tokenizer.json")))
    except Exception as exc:  # the tokenizers library raises bare Exception subclasses
        raise TokenizerError(f"tokenizer {name!r}: {directory}/tokenizer.json cannot be loaded ({exc})") from exc
