"""Per-token text: each id decoded on its own with the rollout's tokenizer.

A token that holds part of a multi-byte character decodes to U+FFFD on its own;
that is the truth about that token, so it is shown as is."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from swerollout.extras import require
from swerollout.tokenizers import TokenizerError, resolve_tokenizer_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer

VIEW_USE = "swerollout view (it decodes every token with the rollout's tokenizer)"


class TokenDecoder:
    """Decodes ids one at a time, each distinct id once."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def pieces(self, ids: Sequence[int]) -> list[str]:
        cache = self._cache
        missing = sorted({i for i in ids if i not in cache})
        if missing:
            # One batched call into the Rust tokenizer for every id not seen yet.
            decoded = self._tokenizer.decode_batch([[i] for i in missing], skip_special_tokens=False)
            cache.update(zip(missing, decoded))
        return [cache[i] for i in ids]


@functools.lru_cache(maxsize=8)
def decoder_for(name: str) -> TokenDecoder:
    """The decoder of a bundled tokenizer name or a tokenizer directory.

    Raises TokenizerError (with the fix) when it cannot be loaded, MissingExtra when the
    tokenizers library is not installed (the `view` extra)."""
    tokenizers = require("tokenizers", "view", VIEW_USE)
    directory = resolve_tokenizer_dir(name)
    try:
        return TokenDecoder(tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json")))
    except Exception as exc:  # the tokenizers library raises bare Exception subclasses
        raise TokenizerError(f"tokenizer {name!r}: {directory}/tokenizer.json cannot be loaded ({exc})") from exc
