"""Two sharded operator replicas through a whole RL step, one SIGKILLed mid-step.

A hundred rollouts on KWOK nodes with simulated runners (the scale bench's step):
the replicas split the shards through Leases; the runners reach replica 0 (the Service)
and are sent on to their shard's owner (421 and its address). Right after the batch's
resume the other replica is SIGKILLed: its Leases expire, replica 0 takes every shard and
watches them, and the runners it owned find their way to the survivor. Every rollout must
end Succeeded, no report may be applied twice, no rollout may need a second attempt
(its pod kept, so nothing ran twice), and each pod is made once.
"""

from __future__ import annotations

import asyncio

import pytest

from bench import scale


# A quiet machine runs it in about three minutes; `make test` runs four parts side by side
# on two cores (a load of 30), where it took nine and more. Each wait of the step is bounded
# well inside the test's own timeout, so a stuck step still ends in the assertions below.
@pytest.mark.timeout(1800)
def test_two_replicas_one_killed_mid_step_lose_nothing_and_repeat_nothing() -> None:
    n = 100
    r = asyncio.run(scale.one_size(n, replicas=2, kill=True, stage_timeout=300))
    assert r["runner_errors"] == []
    assert (r["succeeded"], r["stuck"]) == (n, 0), r["phases_at_end"]
    # Both replicas had a share of the batch (each watched only its own shards), none twice.
    assert sum(r["rollouts_per_replica"]) == n and min(r["rollouts_per_replica"]) > 0, r["rollouts_per_replica"]
    # The survivor held every shard once the dead one's Leases ran out (a deadline, not a timing).
    assert r["shards_taken_over_s"] is not None
    assert r["applied_twice"] == [], "a report applied twice"
    assert r["attempts"] == {"1": n}, "a rollout replayed into a new pod"
    # Its pod and its eval pod, each made once by either replica (a refused create of an
    # existing pod, then adopted, is no second pod).
    assert r["pods_made_twice"] == [] and r["pods_created_per_rollout"] == 2.0
