"""The node drained with rollouts mid-run, on the real kubelet: `kubectl drain` cordons the
node and evicts their pods through the Eviction API; each rollout is replayed from its last
per-turn checkpoint into a fresh pod, which waits Unschedulable while the node is cordoned
(the only node) and runs once it is uncordoned; each finishes with its reward."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from swerollout.api import v1alpha1 as api
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.policy_server.launch import launch
from swerollout_dev.tasks import INDEX_FILE
from tests.support.checkpoints import ledger_runs, restored_snapshot
from tests.support.realnode import SWEROLLOUTS, TERMINAL, RealNode, Rollouts

# Loading the tokenizer took over 180 s with the machine's load at 40.
POLICY_READY = 900.0
# The oracle's first LEDGER turns each run one command (about 25 tokens each, so about 4 s
# at DELAY), then it applies the fix (about 250 tokens) and submits: the drain lands in the
# ledger turns, after at least two checkpoints, while the rollouts are surely mid-run (the
# status is too coarse to tell: progress is written every few seconds).
LEDGER = 6
DELAY = 0.15
BATCH = "drain"
OPERATOR_DATA = "/data/"
"""Where the operator's store is mounted in its pod (the chart); on the node it is a hostPath."""


@pytest.fixture(scope="module")
def slow_oracle(real_node: RealNode) -> Iterator[str]:
    # On the node IP: pods reach it there, and nothing outside this machine does.
    with launch(
        "oracle",
        subprocess=True,
        ready_timeout=POLICY_READY,
        tokenizer="qwen-2.5",
        host=real_node.config.node_ip,
        tasks=real_node.paths.root / "tasks" / INDEX_FILE,
        faults={"delay_per_token": DELAY},
        oracle_ledger=LEDGER,
    ) as server:
        yield server.url


@pytest.fixture
def rollouts(real_node: RealNode, pod_namespace: str) -> Rollouts:
    return Rollouts(real_node, pod_namespace)


def _stored(node: RealNode, ref: dict[str, Any]) -> Path:
    """An object of the operator's filesystem store, read on the node through its volume."""
    uri = str(ref["ref"])
    assert uri.startswith("file://" + OPERATOR_DATA), uri
    return node.paths.root / "volumes" / "operator-data" / uri[len("file://" + OPERATOR_DATA) :]


def _admitted(url: str) -> list[str]:
    """The rids of the /generate requests the stand-in admitted (its request log)."""
    return [r["rid"] for r in httpx.get(f"{url}/_standin/requests", timeout=10).json()["requests"]]


def _unschedulable(node: RealNode, namespace: str, pod: str) -> bool:
    proc = node.kubectl("get", "pod", pod, "-n", namespace, "-o", "json")
    if proc.returncode != 0:
        return False
    conditions = json.loads(proc.stdout)["status"].get("conditions") or []
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


def _explain(rollouts: Rollouts, names: list[str]) -> str:
    """What the rollouts and their pods looked like (for a failed wait)."""
    node, ns = rollouts.node, rollouts.namespace
    pods = node.kubectl("get", "pods", "-n", ns, "-o", "wide").stdout
    events = node.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp").stdout
    statuses = {name: rollouts.status(name) for name in names}
    return f"pods:\n{pods}\nevents:\n{events[-4000:]}\nstatus:\n{json.dumps(statuses)[:6000]}"


def test_node_drained_mid_run_each_rollout_resumes_from_its_checkpoint(rollouts: Rollouts, slow_oracle: str) -> None:
    node, ns = rollouts.node, rollouts.namespace
    names = [f"{BATCH}-{task}" for task in range(2)]
    for task, name in enumerate(names):
        rollouts.create(name, slow_oracle, task=task, batch=BATCH)
    uids = {name: node.get(SWEROLLOUTS, name, "-n", ns)["metadata"]["uid"] for name in names}

    def mid_ledger(name: str, admitted: list[str]) -> bool:
        # Turn 4's request sent: the checkpoints of turns 2 and 3 are stored (each is written
        # during the next turn's generation); at most turn LEDGER's: the fix not yet applied.
        return 4 <= sum(1 for rid in admitted if rid.startswith(f"{uids[name]}-t")) <= LEDGER

    node.wait_for(
        "every rollout in its ledger turns, past two checkpoints",
        lambda: (admitted := _admitted(slow_oracle)) and all(mid_ledger(name, admitted) for name in names),
        timeout=600,
        interval=0.3,
    )
    first = {name: f"{name}-a1" for name in names}  # the first attempt's pod (podspec.rollout_pod_name)
    node_name = node.config.node_name
    try:
        drained = node.kubectl(
            "drain",
            node_name,
            f"--pod-selector={api.LABEL_BATCH}={BATCH}",
            "--delete-emptydir-data",
            "--ignore-daemonsets",
            "--timeout=240s",
            timeout=300,
        )
        assert drained.returncode == 0, f"{drained.stderr}\n{_explain(rollouts, names)}"
        for pod in first.values():
            assert f"pod/{pod} evicted" in drained.stdout + drained.stderr, (drained.stdout, drained.stderr)
        assert node.get("node", node_name)["spec"].get("unschedulable") is True
        # The only node is cordoned: each replay's pod waits for one, and the rollout waits with it.
        for name in names:
            replay = f"{name}-a2"
            try:
                node.wait_for(f"{replay} Unschedulable", lambda pod=replay: _unschedulable(node, ns, pod), timeout=180)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{_explain(rollouts, names)}") from None
            waiting = rollouts.status(name)
            assert waiting["phase"] == "Resuming" and waiting["attempts"] == 2, json.dumps(waiting)[:3000]
            assert [(r["reason"], r["attempt"]) for r in waiting["retries"]] == [("PodLost", 1)], waiting["retries"]
    finally:
        node.kubectl("uncordon", node_name)
    try:
        finals = {name: rollouts.wait_phase(name, TERMINAL, timeout=900) for name in names}
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_explain(rollouts, names)}") from None
    for name, final in finals.items():
        assert final["phase"] == "Succeeded" and final["reward"]["value"] == 1.0, json.dumps(final)[:3000]
        assert final["attempts"] == 2 and final["sandbox"]["podName"] == f"{name}-a2", json.dumps(final)[:3000]
        [retry] = final["retries"]
        assert retry["reason"] == "PodLost" and retry["turns"] >= 2, retry
        resumed = restored_snapshot(_stored(node, final["partial"]["snapshot"]))
        assert len(resumed.state.turns) >= 2
        trajectory = Trajectory.from_bytes(_stored(node, final["result"]["trajectory"]).read_bytes())
        tokens = [*trajectory.prompt_ids, *trajectory.response_ids]
        prefix = resumed.buffer.input_ids
        assert tokens[: len(prefix)] == prefix, f"{name}: the tokens before the loss are the checkpoint's"
        assert any("replayed this rollout into a fresh pod" in n for n in trajectory.info.get("notes", []))
        patch = _stored(node, final["result"]["patch"]).read_text()
        assert ledger_runs(patch) == [f"step {i}" for i in range(LEDGER)], f"{name}: commands ran\n{patch}"
        events = node.get("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")["items"]
        lost = f"sandbox pod {first[name]} lost while running"
        assert any(e.get("reason") == "PodLost" and lost in e.get("message", "") for e in events), events
