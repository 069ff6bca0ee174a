"""Which shard of the operator a rollout belongs to: the one rule, shared by the client
(which labels a rollout at submission) and the operator (whose replicas watch, and answer
the runners of, their own shards only).

A rollout's *bucket* is a stable hash of its namespace and name, taken mod BUCKETS, and
is its `swerollout.io/shard` label. The bucket does not depend on how many shards the
operator runs: shard k of S owns the buckets b with b mod S == k. So the client labels
without knowing the operator's configuration, and S can change between operator
restarts without relabelling anything.
"""

from __future__ import annotations

LABEL_SHARD = "swerollout.io/shard"
BUCKETS = 64
"""Label values are 0..63. A power of two spreads evenly over 2, 4, 8, ... shards; any S
up to 64 works (S = 3 owns 22, 21 and 21 buckets)."""
_NO_BUCKET = "none"
"""A label value no rollout has: the selector of a replica that owns no shard."""


def bucket_of(namespace: str, name: str) -> int:
    """FNV-1a (32 bit) of "namespace/name", mod BUCKETS: stable across processes and
    Python versions (unlike hash())."""
    h = 0x811C9DC5
    for byte in f"{namespace}/{name}".encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % BUCKETS


def shard_label(namespace: str, name: str) -> str:
    return str(bucket_of(namespace, name))


def shard_of_bucket(bucket: int, shards: int) -> int:
    return bucket % shards


def shard_of(namespace: str, name: str, shards: int) -> int:
    return shard_of_bucket(bucket_of(namespace, name), shards)


def selector(owned: frozenset[int], shards: int) -> str:
    """The label selector of the rollouts (and their pods) of the `owned` shards of `shards`."""
    buckets = [str(b) for b in range(BUCKETS) if shard_of_bucket(b, shards) in owned]
    return f"{LABEL_SHARD} in ({','.join(buckets or [_NO_BUCKET])})"
