"""The operator's own status writes cost no API reads and no extra passes.

A reconcile reads the watch-fed caches, and the watch echo of the operator's own
status write is recognised, so a runner's progress (one status write) is the
only API request it causes. Counted by the operator's own request metric and
its per-pass debug log, on a real API server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx

from swerollout.wire import ingest as wire
from tests.support.operator import OperatorProcess
from tests.support.operator_cluster import get_json, ingest_url, mark_ready, phase, setup_rollout, wait_for


def _requests(operator: OperatorProcess, method: str) -> float:
    found = re.search(rf'swerollout_api_requests_total{{method="{method}"}} ([0-9.e+]+)', operator.metrics())
    return float(found.group(1)) if found else 0.0


def _passes(operator: OperatorProcess, namespace: str, name: str) -> list[int]:
    """resourceVersions seen by each reconcile pass over the rollout, from the operator's log."""
    pattern = rf"pass over {re.escape(namespace)}/{re.escape(name)} at resourceVersion (\d+)"
    return [int(rv) for rv in re.findall(pattern, operator.log_path.read_text(errors="replace"))]


def test_own_status_write_causes_no_reads_and_no_pass(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    uid, token = setup_rollout(operator, kubectl, namespace, "quiet")
    mark_ready(kubectl, namespace, "quiet-a1")
    wait_for("Running", lambda: phase(kubectl, namespace, "quiet") == "Running", op=operator)
    passes_before = len(_passes(operator, namespace, "quiet"))
    reads_before = _requests(operator, "GET")
    patches_before = _requests(operator, "PATCH")

    # The runner reports progress: the operator writes it into status (its own write).
    progress = wire.ProgressReport(turns=3, context_tokens=100, generated_tokens=50).model_dump_json()
    answer = httpx.post(
        ingest_url(operator, namespace, "quiet", uid, "/progress"),
        content=progress,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200
    written = wait_for(
        "progress in status",
        lambda: (
            (obj := get_json(kubectl, "swer", "quiet", "-n", namespace))
            and (obj["status"].get("progress") or {}).get("turns") == 3
            and obj
        ),
        op=operator,
    )
    own_rv = int(written["metadata"]["resourceVersion"])

    # A user's change after it: the watch delivers events in order, so once the pass
    # for this change is logged, the echo of the status write has been handled too.
    labelled = kubectl(
        "patch",
        "swer",
        "quiet",
        "-n",
        namespace,
        "--type=merge",
        "-o",
        "json",
        "-p",
        json.dumps({"metadata": {"labels": {"marker": "1"}}}),
    )
    marker_rv = int(json.loads(labelled.stdout)["metadata"]["resourceVersion"])
    assert marker_rv > own_rv
    wait_for(
        "the marker's pass", lambda: any(rv >= marker_rv for rv in _passes(operator, namespace, "quiet")), op=operator
    )

    new_passes = _passes(operator, namespace, "quiet")[passes_before:]
    assert own_rv not in new_passes, f"the echo of our own write started a pass: {new_passes}"
    # The marker's pass; kopf's own annotation write after it changes nothing we read.
    assert len(new_passes) == 1, new_passes
    assert _requests(operator, "GET") == reads_before, "a pass read from the API server instead of the caches"
    assert _requests(operator, "PATCH") == patches_before + 1, "one status write for the progress, nothing else"
    assert json.loads(json.dumps(written["status"]["progress"]))["generatedTokens"] == 50
