"""The shard rule shared by the client and the operator's replicas."""

from __future__ import annotations

from collections import Counter

from swerollout.api.shards import BUCKETS, LABEL_SHARD, bucket_of, selector, shard_label, shard_of


def test_the_bucket_is_a_fixed_function_of_namespace_and_name() -> None:
    # Pinned: a client and an operator of different versions (or Pythons) must agree.
    assert bucket_of("bench", "r0000") == 48 and bucket_of("default", "a") == 38
    assert shard_label("bench", "r0000") == "48"
    assert all(0 <= bucket_of("ns", f"r{i}") < BUCKETS for i in range(1000))


def test_shards_split_evenly_and_selectors_cover_each_bucket_once() -> None:
    counts = Counter(shard_of("ns", f"r{i:05d}", 4) for i in range(20000))
    assert set(counts) == {0, 1, 2, 3} and max(counts.values()) - min(counts.values()) < 200
    for shards in (1, 2, 3, 4, 8):
        owned_by = Counter()
        for k in range(shards):
            text = selector(frozenset({k}), shards)
            assert text.startswith(f"{LABEL_SHARD} in (")
            owned_by.update(text.split("(")[1].rstrip(")").split(","))
        assert owned_by == Counter({str(b): 1 for b in range(BUCKETS)}), f"{shards} shards"
    # Owning nothing selects nothing (an empty `in ()` is not a valid selector).
    assert selector(frozenset(), 2) == f"{LABEL_SHARD} in (none)"
