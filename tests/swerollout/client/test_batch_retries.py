"""What a batch's progress says of retries and GRPO groups (swerollout.client.progress)."""

from __future__ import annotations

from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import LABEL_SAMPLE
from swerollout.client.progress import BatchProgress


def _member(name: str, sample: str, phase: str, *, retries: list[str] = (), exit_status: str = "submitted",
            graded: bool = True) -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {
        "phase": phase,
        "attempts": 1 + len(retries),
        "retries": [
            {"attempt": i + 1, "reason": reason, "turns": 3, "at": "2026-12-01T21:00:00Z"}
            for i, reason in enumerate(retries)
        ],
    }
    if phase in ("Succeeded", "Failed"):
        status["result"] = {"exitStatus": exit_status, "turns": 3, "promptTokens": 10, "responseTokens": 20}
        status["reward"] = {"value": 1.0, "resolved": True, "graded": graded}
    return {
        "metadata": {"name": name, "labels": {api.LABEL_BATCH: "b", LABEL_SAMPLE: sample}},
        "spec": {},
        "status": status,
    }


def test_retries_are_counted_by_reason_and_whole_groups_are_complete() -> None:
    objects = [
        _member("b-0-0", "0", "Succeeded", retries=["PodLost"]),
        _member("b-0-1", "0", "Succeeded"),
        _member("b-1-0", "1", "Succeeded", retries=["PodLost", "InferenceFailed"]),
        _member("b-1-1", "1", "Succeeded", retries=["EvalPodFailed"]),
    ]
    progress = BatchProgress.from_objects("b", objects)
    assert progress.retried == 3
    assert progress.retry_reasons == {"PodLost": 2, "InferenceFailed": 1, "EvalPodFailed": 1}
    assert [m.attempts for m in progress.members] == [2, 1, 3, 2]
    assert progress.groups_complete and progress.incomplete_groups == []


def test_a_failed_member_leaves_its_group_incomplete_and_an_unfinished_batch_is_not_complete() -> None:
    failed = _member("b-1-1", "1", "Failed", exit_status="exit_api", graded=False)
    objects = [_member("b-0-0", "0", "Succeeded"), _member("b-1-0", "1", "Succeeded"), failed]
    progress = BatchProgress.from_objects("b", objects)
    assert not progress.groups_complete and progress.incomplete_groups == ["1"]
    running = BatchProgress.from_objects("b", [_member("b-0-0", "0", "Running", retries=["PodLost"])])
    assert not running.groups_complete and running.retried == 1
