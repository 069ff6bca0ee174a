"""tiny-lm's prefix cache: a new request starts from the KV of an earlier one that shares its first tokens.

An agent sends its whole conversation every turn, and the previous turn's request
already computed the KV of all of it but the newest messages. SGLang's radix cache
keeps those keys and values; this keeps a few whole caches instead of a tree of pages,
which is enough for the stand-in: a request takes the longest common token prefix
of any entry and prefills only the rest.

Entries are bounded in number and in positions held (least recently used go first),
and each remembers the weights it was computed with: after a weight update no entry
of the old weights can match (``clear`` also drops them at once).

Sharing is free because ``KVCache`` never writes an array in place: an append makes
new arrays, so a snapshot (arrays plus length) stays valid while its generation goes on.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from swerollout_dev.policy_server.policies.tiny_lm import KVCache, TinyLM


@dataclass(frozen=True)
class _Entry:
    weights: TinyLM
    tokens: list[int]
    """Its generation's token list, which only ever grows: the first ``cache.length`` are cached."""
    cache: KVCache


class PrefixCache:
    def __init__(self, *, max_entries: int, max_positions: int, min_positions: int) -> None:
        self.max_entries = max_entries
        self.max_positions = max_positions
        # Shorter caches (a health probe's one token, say) cost less to recompute than
        # the entry they would push out.
        self.min_positions = min_positions
        self._entries: OrderedDict[object, _Entry] = OrderedDict()
        self._positions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, weights: TinyLM, input_ids: list[int]) -> KVCache | None:
        """A cache holding the longest cached prefix of ``input_ids`` under ``weights``, or None.

        At most all but the last input token is reused: its logits are what the request
        needs next, and only a forward pass produces them. An entry the request extends
        entirely is dropped: the request's own entry will hold all of it and more.
        """
        best_key: object = None
        best = 0
        limit = len(input_ids) - 1
        if limit <= 0:
            return None
        query = np.asarray(input_ids[:limit], dtype=np.int64)
        for key, entry in self._entries.items():
            if entry.weights is not weights:
                continue
            n = min(entry.cache.length, limit)
            differs = np.flatnonzero(np.asarray(entry.tokens[:n], dtype=np.int64) != query[:n])
            shared = int(differs[0]) if differs.size else n
            if shared > best:
                best_key, best = key, shared
        if best == 0:
            return None
        entry = self._entries[best_key]
        if best == entry.cache.length:
            self._drop(best_key)
        else:
            self._entries.move_to_end(best_key)
        return entry.cache.prefix(best)

    def keep(self, owner: object, weights: TinyLM, tokens: list[int], cache: KVCache) -> None:
        """Record (or move forward) ``owner``'s cache: ``tokens[:cache.length]`` are in it."""
        self._drop(owner)
        if not self.min_positions <= cache.length <= self.max_positions:
            return
        self._entries[owner] = _Entry(weights=weights, tokens=tokens, cache=cache.prefix(cache.length))
        self._positions += cache.length
        while len(self._entries) > self.max_entries or self._positions > self.max_positions:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self._positions = 0

    def _drop(self, key: object) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._positions -= entry.cache.length
