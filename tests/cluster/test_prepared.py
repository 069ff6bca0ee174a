"""Warm starts on the real node: a prepared batch against a cold one, the release of a
prepared pod past its timeout, and a prewarmed eval pod, with the kubelet starting the task
images, the chart's operator and the cluster's oracle (deterministic: the same prompt samples
the same tokens). tests/e2e/test_e2e_prepared.py does the same on the node agent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from swerollout.api import v1alpha1 as api
from swerollout.client import RolloutClient
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.cluster.supervisor import POLICY_PORT
from swerollout_dev.policy_server.launch import launch
from swerollout_dev.tasks import INDEX_FILE
from tests.support.realnode import TERMINAL, RealNode, Rollouts

TASKS = (0, 1)
# As tests/support/realnode.rollout_body: small requests so a batch schedules at once on 2 cores.
SANDBOX = {
    "startupTimeoutSeconds": 600,
    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "4Gi"}},
}
POLICY_READY = 900.0  # tokenizer load under load, as in test_rollouts


@pytest.fixture
def rollouts(real_node: RealNode, pod_namespace: str) -> Rollouts:
    return Rollouts(real_node, pod_namespace)


@pytest.fixture
def client(real_node: RealNode, pod_namespace: str) -> Iterator[RolloutClient]:
    with RolloutClient.connect(real_node.paths.kubeconfig, namespace=pod_namespace) as c:
        yield c


def _inference(node: RealNode, url: str | None = None) -> dict[str, Any]:
    return {"endpoint": url or f"http://{node.config.node_ip}:{POLICY_PORT}", "tokenizer": "qwen-2.5"}


def _condition(status: dict[str, Any], kind: str) -> tuple[str, str] | None:
    found = next((c for c in status.get("conditions") or [] if c["type"] == kind), None)
    return (found["status"], found["reason"]) if found else None


def _pods(rollouts: Rollouts, name: str) -> list[dict[str, Any]]:
    items = rollouts.node.get("pods", "-n", rollouts.namespace, "-l", f"{api.LABEL_ROLLOUT}={name}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _trajectory(node: RealNode, status: dict[str, Any]) -> Trajectory:
    """Read from the operator's volume: the chart's PVC, mounted at /data, is a hostPath here."""
    uri = status["result"]["trajectory"]["ref"]
    assert uri.startswith("file:///data/"), uri
    path = node.paths.root / "volumes" / "operator-data" / uri.removeprefix("file:///data/")
    return Trajectory.from_bytes(path.read_bytes())


def _graded(status: dict[str, Any]) -> dict[str, Any]:
    """The reward as graded: without where its report is stored, when it came, how long the tests took."""
    return {k: v for k, v in status["reward"].items() if k not in ("report", "gradedAt", "testsSeconds")}


def _tokens(node: RealNode, status: dict[str, Any]) -> list[int]:
    trajectory = _trajectory(node, status)
    return [*trajectory.prompt_ids, *trajectory.response_ids]


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:3000]


def test_a_prepared_batch_parks_then_runs_to_the_tokens_and_rewards_of_a_cold_one(
    real_node: RealNode, rollouts: Rollouts, client: RolloutClient
) -> None:
    tasks = [rollouts.instances[t] for t in TASKS]
    # Both batches at once: the cold one runs while the prepared one gets ready.
    cold = client.submit_batch(tasks, 1, batch="cold", inference=_inference(real_node), sandbox=SANDBOX)
    warm = client.submit_batch(tasks, 1, batch="warm", inference=_inference(real_node), sandbox=SANDBOX, prepared=True)
    assert client.wait_prepared("warm", timeout=600) == sorted(warm)
    cold_done = {name: rollouts.wait_phase(name, TERMINAL, timeout=600) for name in cold}
    assert all(s["phase"] == "Succeeded" and s["reward"]["value"] == 1.0 for s in cold_done.values()), _dump(cold_done)
    for name in warm:
        status = rollouts.status(name)
        # Still parked after the cold batch's whole run: nothing went to the policy before the go.
        assert status["phase"] == "Prepared" and not status.get("progress"), _dump(status)
        assert _condition(status, "Prepared") == ("True", "Prepared")
        assert status["prepared"]["promptTokens"] > 0
        (pod,) = _pods(rollouts, name)
        assert pod["status"]["phase"] == "Running"
        sandbox = next(c for c in pod["spec"]["containers"] if c["name"] == "sandbox")
        assert sandbox["imagePullPolicy"] == "IfNotPresent"

    assert client.resume("warm") == sorted(warm)
    done = {name: rollouts.wait_phase(name, TERMINAL, timeout=600) for name in warm}
    for prepared, baseline in zip(warm, cold, strict=True):
        status, reference = done[prepared], cold_done[baseline]
        assert status["phase"] == "Succeeded" and status["attempts"] == 1, _dump(status)
        assert _graded(status) == _graded(reference)
        tokens = _tokens(real_node, status)
        assert tokens == _tokens(real_node, reference), f"{prepared}: the tokens of {baseline}"
        assert status["prepared"]["promptTokens"] == len(_trajectory(real_node, status).prompt_ids)


def test_a_prepared_rollout_past_its_timeout_releases_its_pod_and_still_starts(
    real_node: RealNode, rollouts: Rollouts
) -> None:
    rollouts.create(
        "held",
        f"http://{real_node.config.node_ip}:{POLICY_PORT}",
        task=0,
        batch="held",
        suspend=True,
        sandbox={"preparedTimeoutSeconds": 5},
    )
    first_pod = rollouts.wait_phase("held", {"Prepared"}, timeout=600)["sandbox"]["podName"]
    released = real_node.wait_for(
        "held released",
        lambda: (s := rollouts.status("held")) and _condition(s, "Prepared") == ("False", "Released") and s,
        timeout=180,
    )
    assert released["phase"] == "Prepared" and released["sandbox"]["reclaimedAt"], _dump(released)
    assert released["prepared"]["releasedAt"]
    real_node.wait_for("the prepared pod deleted", lambda: not _pods(rollouts, "held"), timeout=180)

    rollouts.set_suspend("held", False)
    done = rollouts.wait_phase("held", TERMINAL, timeout=600)
    assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, _dump(done)
    assert done["attempts"] == 2 and done["sandbox"]["podName"] != first_pod, _dump(done)
    assert done["prepared"]["restartedAt"]
    real_node.wait_for("no pod left behind", lambda: not _pods(rollouts, "held"), timeout=180)


def test_a_prewarmed_eval_pod_waits_for_the_patch_grades_it_and_goes(real_node: RealNode, rollouts: Rollouts) -> None:
    # The oracle slowed down, so the eval pod is seen ready while the rollout still runs.
    with launch(
        "oracle",
        subprocess=True,
        ready_timeout=POLICY_READY,
        tokenizer="qwen-2.5",
        host=real_node.config.node_ip,
        tasks=str(real_node.paths.root / "tasks" / INDEX_FILE),
        faults={"delay_per_token": 0.03},
    ) as slow:
        rollouts.create("prewarm", slow.url, task=1, batch="prewarm", reward={"prewarm": True})
        seen: dict[str, set[str]] = {}  # eval pod uid -> the rollout phases it was seen in (? = not ready)

        def finished() -> dict[str, Any] | None:
            status = rollouts.status("prewarm")
            for pod in _pods(rollouts, "prewarm"):
                if pod["metadata"]["labels"].get(api.LABEL_COMPONENT) != "eval":
                    continue
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or []
                )
                seen.setdefault(pod["metadata"]["uid"], set()).add(f"{status.get('phase')}{'' if ready else '?'}")
            return status if status.get("phase") in TERMINAL else None

        done = real_node.wait_for("prewarm finished", finished, timeout=600, interval=0.5)
    assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, _dump(done)
    assert done["evaluation"]["attempt"] == 1 and "eval" in done["logs"], _dump(done)
    # What the bench measures finish -> reward with: the tests' own time, and the two receipts.
    assert done["reward"]["testsSeconds"] > 0, _dump(done)
    assert _stamp(done["reward"]["gradedAt"]) - _stamp(done["result"]["finishedAt"]) > done["reward"]["testsSeconds"]
    # One eval pod, ready while the rollout still ran, graded the patch (never replaced).
    assert len(seen) == 1 and "Running" in next(iter(seen.values())), seen
    real_node.wait_for("no pod left behind", lambda: not _pods(rollouts, "prewarm"), timeout=180)
