"""A rollout's batch in the operator's pure parts: what its runner is told, and the caches
that find a batch's members (no cluster needed)."""

from __future__ import annotations

from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import Phase
from swerollout.wire.ingest import Assignment, AssignmentKind
from swerollout_operator.cache import BatchCache, RolloutCache
from swerollout_operator.phases import assignment_for

from .test_pure import rollout

PARTIAL = {
    "snapshot": {"ref": "file:///s", "sha256": "0" * 64, "bytes": 1},
    "turns": 1,
    "tokens": 9,
    "abortedAt": "2026-01-01T00:00:00Z",
}


def told(body: dict[str, Any], **kwargs: Any) -> Assignment:
    """assignment_for over the rollout as the operator's cache holds it."""
    meta = {"name": "r", "namespace": "ns", "uid": "u1", **body["metadata"]}
    entry, _ = RolloutCache().observe({**body, "metadata": meta})
    return assignment_for(entry, **kwargs)


def body(
    phase: Phase,
    *,
    suspend: bool = False,
    generation: int = 3,
    batch: str | None = "b1",
    uid: str = "u1",
    name: str = "r1",
    rv: int = 1,
    weight_version: str | None = None,
) -> dict[str, Any]:
    labels = {api.LABEL_BATCH: batch} if batch else {}
    inference: dict[str, Any] = {"endpoint": "http://sglang:30000", "tokenizer": "qwen-2.5"}
    if weight_version:
        inference["weightVersion"] = weight_version
    status: dict[str, Any] = {"phase": phase.value, "attempts": 1}
    if phase in (Phase.ABORTED, Phase.RESUMING):
        status["partial"] = PARTIAL
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "generation": generation,
            "resourceVersion": str(rv),
            "labels": labels,
        },
        "spec": rollout(inference=inference, suspend=suspend).to_wire()["spec"],
        "status": status,
    }


def spec(**fields: Any) -> api.SWERolloutBatchSpec:
    return api.SWERolloutBatchSpec.model_validate(fields)


def test_a_suspended_batch_aborts_a_running_member_and_each_suspension_has_its_own_id() -> None:
    running = body(Phase.RUNNING)
    assert told(running, role="rollout", attempt=1).kind is AssignmentKind.RUN
    assert told(running, role="rollout", attempt=1, batch=spec()).kind is AssignmentKind.RUN
    first = told(running, role="rollout", attempt=1, batch=spec(suspend=True), batch_generation=2)
    again = told(running, role="rollout", attempt=1, batch=spec(suspend=True), batch_generation=4)
    assert first.kind is again.kind is AssignmentKind.ABORT
    # abort(batch), resume(batch), abort(batch): the runner must act on the second abort too.
    assert first.id != again.id
    # The rollout's own suspension keeps the id it had before batches existed.
    own = told(body(Phase.RUNNING, suspend=True), role="rollout", attempt=1)
    assert own.id == "abort:1:3"
    assert told(body(Phase.RESUMING), role="rollout", attempt=1, batch=spec(suspend=True)).kind is (
        AssignmentKind.ABORT
    )


def test_an_aborted_member_waits_until_both_flags_are_false_and_resumes_with_the_batchs_version() -> None:
    aborted = body(Phase.ABORTED, weight_version="v1")
    assert told(aborted, role="rollout", attempt=1, batch=spec(suspend=True)).kind is AssignmentKind.WAIT
    assert told(body(Phase.ABORTED, suspend=True), role="rollout", attempt=1).kind is AssignmentKind.WAIT
    # No longer suspended: the runner resumes at once, with the id Resuming will answer.
    early = told(aborted, role="rollout", attempt=1, batch=spec(weightVersion="v2"))
    assert early.kind is AssignmentKind.RESUME and early.spec is not None
    assert early.spec["inference"]["weightVersion"] == "v2"
    assert early.id == told(body(Phase.RESUMING), role="rollout", attempt=1).id
    reclaimed = body(Phase.ABORTED)
    reclaimed["status"]["sandbox"] = {"reclaimedAt": "2026-01-01T00:05:00Z"}
    assert told(reclaimed, role="rollout", attempt=1).kind is AssignmentKind.WAIT, "no runner to tell"
    resuming = body(Phase.RESUMING, weight_version="v1")
    resume = told(resuming, role="rollout", attempt=1, batch=spec(weightVersion="v2"))
    assert resume.kind is AssignmentKind.RESUME and resume.spec is not None
    assert resume.spec["inference"]["weightVersion"] == "v2"
    assert resuming["spec"]["inference"]["weightVersion"] == "v1", "the cached body is never changed"
    plain = told(resuming, role="rollout", attempt=1, batch=spec())
    assert plain.spec is not None and plain.spec["inference"]["weightVersion"] == "v1"
    # Suspended by name inside a resumed batch: stays suspended.
    own = body(Phase.RESUMING, suspend=True)
    assert told(own, role="rollout", attempt=1, batch=spec()).kind is AssignmentKind.ABORT


def batch_body(name: str, generation: int, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "generation": generation}, "spec": fields}


def test_batch_cache_reports_only_changes_members_see() -> None:
    cache = BatchCache()
    assert cache.observe(batch_body("b1", 1, suspend=True)) == ("ns", "b1")
    assert cache.observe(batch_body("b1", 1, suspend=True)) is None, "a re-listing is no news"
    state = cache.get(("ns", "b1"))
    assert state is not None and state.spec.suspend and state.generation == 1
    assert cache.observe(batch_body("b1", 2, suspend=False, weightVersion="v2")) == ("ns", "b1")
    # A spec the model refuses keeps the last good state: a whole batch never flips on garbage.
    assert cache.observe(batch_body("b1", 3, suspend="maybe")) is None
    assert cache.get(("ns", "b1")) == cache.batches[("ns", "b1")] and not cache.batches[("ns", "b1")].spec.suspend
    assert cache.observe(batch_body("b1", 3), deleted=True) == ("ns", "b1")
    assert cache.get(("ns", "b1")) is None and cache.get(None) is None
    assert cache.observe(batch_body("b1", 3), deleted=True) is None


def test_rollout_cache_finds_a_batchs_members_as_labels_come_and_go() -> None:
    cache = RolloutCache()
    cache.observe(body(Phase.RUNNING, uid="u1", name="r1"))
    cache.observe(body(Phase.RUNNING, uid="u2", name="r2"))
    cache.observe(body(Phase.RUNNING, uid="u3", name="r3", batch="b2"))
    cache.observe(body(Phase.RUNNING, uid="u4", name="r4", batch=None))
    assert [e.uid for e in cache.members(("ns", "b1"))] == ["u1", "u2"]
    assert [e.uid for e in cache.members(("ns", "b2"))] == ["u3"]
    assert cache.members(("other", "b1")) == []
    cache.observe(body(Phase.RUNNING, uid="u2", name="r2", batch="b2", rv=2))  # relabelled
    assert [e.uid for e in cache.members(("ns", "b1"))] == ["u1"]
    assert [e.uid for e in cache.members(("ns", "b2"))] == ["u2", "u3"]
    cache.forget("u3")
    assert [e.uid for e in cache.members(("ns", "b2"))] == ["u2"]
    assert cache.entries["u4"].batch_key is None
