"""Least-recently-used cache on top of an ordered dict (oldest use first)."""

from collections import OrderedDict

_MISSING = object()


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1, got %r" % capacity)
        self.capacity = capacity
        self._data = OrderedDict()
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        # A membership test is not a use: it must not change the eviction order.
        return key in self._data

    def get(self, key, default=None):
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            self._misses += 1
            return default
        self._hits += 1
        return value

    def put(self, key, value):
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)
            self._evictions += 1

    def stats(self):
        return {"hits": self._hits, "misses": self._misses, "evictions": self._evictions}
