"""Warm starts end to end on the embedded default: prepared batches, the release of a
prepared pod, and a prewarmed eval pod.

Real control plane, the operator under the chart's ServiceAccount, the node agent, the
SGLang-compatible oracle (deterministic: the same prompt samples the same tokens), real
tokenizers and the file:// result store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from agent_runner.pod import eval_timeline, startup
from swerollout.api import v1alpha1 as api
from swerollout.client import RolloutClient
from swerollout.kube import PODS
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.policy_server.launch import launch
from tests.support.devstack import DevStack, dump

TERMINAL = {"Succeeded", "Failed"}
TASKS = (0, 1)


@pytest.fixture(scope="module")
def oracle(dev_stack: DevStack) -> Iterator[str]:
    """This module's own oracle, so that what it served counts this module's requests only."""
    with launch(
        "oracle", subprocess=True, tokenizer="qwen-2.5", tasks=dev_stack.workdir / "tasks" / "instances.jsonl"
    ) as server:
        yield server.url


def _served(url: str) -> int:
    return int(httpx.get(f"{url}/get_server_info", timeout=30).json()["requests_served"])


def _condition(status: dict[str, Any], kind: str) -> tuple[str, str] | None:
    found = next((c for c in status.get("conditions") or [] if c["type"] == kind), None)
    return (found["status"], found["reason"]) if found else None


def _pods(stack: DevStack, name: str) -> list[dict[str, Any]]:
    pods = stack.kube.list(PODS, "default", label_selector=f"{api.LABEL_ROLLOUT}={name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _by_role(stack: DevStack, name: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["labels"][api.LABEL_COMPONENT]: p for p in _pods(stack, name)}


def _graded(status: dict[str, Any]) -> dict[str, Any]:
    """The reward as graded: without where its report is stored, when it came, how long the tests took."""
    return {k: v for k, v in status["reward"].items() if k not in ("report", "gradedAt", "testsSeconds")}


def _stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _tokens(stack: DevStack, status: dict[str, Any]) -> list[int]:
    trajectory = Trajectory.from_bytes(stack.read_object(status["result"]["trajectory"]))
    return [*trajectory.prompt_ids, *trajectory.response_ids]


def test_a_prepared_batch_parks_then_runs_to_the_tokens_and_rewards_of_a_cold_one(
    dev_stack: DevStack, oracle: str
) -> None:
    cold = {task: dev_stack.rollout(f"cold-{task}", endpoint=oracle, task=task, batch="cold") for task in TASKS}
    cold_done = {task: dev_stack.wait_phase(f"cold-{task}", TERMINAL, timeout=300) for task in TASKS}
    assert cold and all(s["phase"] == "Succeeded" and s["reward"]["value"] == 1.0 for s in cold_done.values()), dump(
        cold_done
    )

    with RolloutClient.connect(dev_stack.paths.kubeconfig, namespace="default") as client:
        client.prepare("warm")
        for task in TASKS:
            dev_stack.rollout(f"warm-{task}", endpoint=oracle, task=task, batch="warm", reward={"prewarm": True})
        served = _served(oracle)
        assert client.wait_prepared("warm", timeout=300) == sorted(f"warm-{task}" for task in TASKS)
        for task in TASKS:
            status = dev_stack.status(f"warm-{task}")
            assert status["phase"] == "Prepared", dump(status)
            assert _condition(status, "Prepared") == ("True", "Prepared")
            assert _condition(status, "SandboxReady") == ("True", "Preparing")
            assert status["prepared"]["promptTokens"] > 0 and not status.get("progress"), dump(status)
            # Its eval pod is prepared too (the run after the go may be short), and is ready
            # before the go.
            pods = dev_stack.wait(
                f"warm-{task}'s eval pod ready while Prepared",
                lambda t=task: (
                    (pods := _by_role(dev_stack, f"warm-{t}")) and "eval" in pods and _ready(pods["eval"]) and pods
                ),
                timeout=300,
            )
            assert set(pods) == {"rollout", "eval"} and pods["rollout"]["status"]["phase"] == "Running"
            assert dev_stack.status(f"warm-{task}")["phase"] == "Prepared"
        assert _served(oracle) == served, "a prepared rollout sends no /generate before its go"

        go = time.time()
        assert client.resume("warm") == sorted(f"warm-{task}" for task in TASKS)
        done = {task: dev_stack.wait_phase(f"warm-{task}", TERMINAL, timeout=300) for task in TASKS}
    for task in TASKS:
        warm, baseline = done[task], cold_done[task]
        assert warm["phase"] == "Succeeded" and warm["attempts"] == 1, dump(warm)
        assert _graded(warm) == _graded(baseline)
        # The eval pod that waited through the prepared phase graded the patch (its runner
        # started before the go, and was told to grade after the finish: agent_runner/pod/eval_timeline.py).
        assert warm["evaluation"]["podName"] == f"warm-{task}-eval1", dump(warm)
        marks = eval_timeline.parse_line(dev_stack.read_object(warm["logs"]["eval"]).decode())
        assert marks["started"] < go and _stamp(warm["result"]["finishedAt"]) <= marks["assignment"], marks
        graded = ("assignment", "patch", "applied", "tests", "graded", "evaluated", "uploaded")
        assert [marks[step] for step in graded] == sorted(marks[step] for step in graded), marks
        # The runner's start: set up before the go, and nothing but the request after it.
        start = startup.parse_line(dev_stack.read_object(warm["logs"]["runner"]).decode())
        assert start["setup"] < start[startup.GO] <= start[startup.FIRST_GENERATE], start
        tokens = _tokens(dev_stack, warm)
        assert tokens == _tokens(dev_stack, baseline), f"task {task}: the same tokens as the cold run"
        prompt = Trajectory.from_bytes(dev_stack.read_object(warm["result"]["trajectory"])).prompt_ids
        assert warm["prepared"]["promptTokens"] == len(prompt)


def test_a_prepared_rollout_past_its_timeout_releases_its_pod_and_still_starts(
    dev_stack: DevStack, oracle: str
) -> None:
    dev_stack.rollout(
        "held",
        endpoint=oracle,
        task=0,
        batch="held",
        suspend=True,
        sandbox={"preparedTimeoutSeconds": 10},
        reward={"prewarm": True},
    )
    # Released whether or not its runner was done preparing within the 10 s.
    first_pod = dev_stack.wait_phase("held", {"Prepared"})["sandbox"]["podName"]
    dev_stack.wait("the prepared rollout's eval pod", lambda: "eval" in _by_role(dev_stack, "held"), timeout=120)
    released = dev_stack.wait(
        "held released",
        lambda: (s := dev_stack.status("held")) and _condition(s, "Prepared") == ("False", "Released") and s,
        timeout=120,
    )
    assert released["phase"] == "Prepared" and released["sandbox"]["reclaimedAt"], dump(released)
    assert released["prepared"]["releasedAt"]
    # Both pods go: the prepared one and its waiting eval pod.
    dev_stack.wait("the prepared pods deleted", lambda: not _pods(dev_stack, "held"), timeout=120)

    dev_stack.set_suspend("held", False)
    done = dev_stack.wait_phase("held", TERMINAL, timeout=300)
    assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, dump(done)
    assert done["attempts"] == 2 and done["sandbox"]["podName"] != first_pod, dump(done)
    assert done["prepared"]["restartedAt"]


def test_a_prewarmed_eval_pod_waits_for_the_patch_grades_it_and_goes(dev_stack: DevStack) -> None:
    # Slowed so the eval pod is seen ready while the rollout still runs.
    with launch(
        "oracle",
        subprocess=True,
        tokenizer="qwen-2.5",
        tasks=dev_stack.workdir / "tasks" / "instances.jsonl",
        faults={"delay_per_token": 0.03},
    ) as slow:
        dev_stack.rollout("prewarm", endpoint=slow.url, task=1, batch="prewarm", reward={"prewarm": True})

        seen: dict[str, set[str]] = {}  # eval pod uid -> the rollout phases it was seen in

        def finished() -> dict[str, Any] | None:
            status = dev_stack.status("prewarm")
            for pod in _pods(dev_stack, "prewarm"):
                if pod["metadata"]["labels"][api.LABEL_COMPONENT] != "eval":
                    continue
                seen.setdefault(pod["metadata"]["uid"], set()).add(f"{status.get('phase')}{'' if _ready(pod) else '?'}")
            return status if status.get("phase") in TERMINAL else None

        done = dev_stack.wait("prewarm finished", finished, timeout=300)
    assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, dump(done)
    assert done["evaluation"]["attempt"] == 1 and "eval" in done["logs"], dump(done)
    # One eval pod, ready while the rollout still ran, graded the patch (never replaced).
    assert len(seen) == 1 and "Running" in next(iter(seen.values())), seen
    dev_stack.wait("no pod left behind", lambda: not _pods(dev_stack, "prewarm"), timeout=120)
