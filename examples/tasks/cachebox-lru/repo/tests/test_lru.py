import pytest

from cachebox import LRUCache


def test_put_then_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("zzz", "dflt") == "dflt"


def test_untouched_oldest_is_evicted():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert len(cache) == 2


def test_put_existing_key_refreshes():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.get("a") == 10
    assert "b" not in cache


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_stats_counts_hits_and_misses():
    cache = LRUCache(1)
    cache.put("a", 1)
    cache.get("a")
    cache.get("b")
    cache.put("b", 2)
    assert cache.stats() == {"hits": 1, "misses": 1, "evictions": 1}
