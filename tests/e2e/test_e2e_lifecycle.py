"""The rollout lifecycle end to end on the embedded default.

Real control plane, the chart, the operator under the chart's ServiceAccount, the
node agent running pods as local processes (sandbox = swerex-remote in a fresh
checkout, runner = agent_runner), the SGLang-compatible policy server, real
tokenizers, and the file:// result store.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from agent_runner.policy.rl_model import Snapshot
from swerollout.api import v1alpha1 as api
from swerollout.client import RolloutClient
from swerollout.instances import SWEBenchInstance
from swerollout.kube import PODS, SECRETS, SWEROLLOUTBATCHES, SWEROLLOUTS, KubeClient
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.policy_server.launch import launch
from swerollout_dev.tasks import materialize_tasks
from tests.support.devstack import ROOT, DevStack, dump, post_json

TERMINAL = {"Succeeded", "Failed"}


@pytest.fixture(scope="module")
def null_policy(dev_stack: DevStack) -> Iterator[str]:
    with launch("null", subprocess=True, tokenizer="qwen-2.5") as server:
        yield server.url


@pytest.fixture(scope="module")
def slow_policy(dev_stack: DevStack) -> Iterator[str]:
    """tiny-lm (real sampling, real logprobs) slowed down so aborts land mid-generation."""
    with launch(
        "tiny-lm", subprocess=True, tokenizer="qwen-2.5", weight_version="v1", faults={"delay_per_token": 0.08}
    ) as server:
        yield server.url


@pytest.fixture(scope="module")
def slow_oracle(dev_stack: DevStack) -> Iterator[str]:
    """The oracle, slowed so a batch abort lands mid-generation; SGLang 0.5.23's semantics
    (exact-rid aborts, the context margin, routed experts over prompt + output)."""
    with launch(
        "oracle",
        subprocess=True,
        tokenizer="qwen-2.5",
        tasks=dev_stack.workdir / "tasks" / "instances.jsonl",
        weight_version="v1",
        faults={"delay_per_token": 0.05},
    ) as server:
        yield server.url


# Long enough to abort in the middle, short enough to finish: tiny-lm's random text is
# never a valid action, so the run ends on max turns (reward 0, ungraded).
SLOW_AGENT = {"maxTurns": 6, "maxRequeries": 20}
SLOW_INFERENCE = {"sampling": {"maxNewTokens": 24, "temperature": 1.0}}


def _slow_rollout(stack: DevStack, name: str, endpoint: str) -> None:
    stack.rollout(name, endpoint=endpoint, agent=SLOW_AGENT, inference=SLOW_INFERENCE)
    stack.wait(
        f"{name} generating", lambda: (stack.status(name).get("progress") or {}).get("turns", 0) >= 1, timeout=180
    )


def test_oracle_succeeds_with_reward_1_and_null_gets_0(dev_stack: DevStack, null_policy: str) -> None:
    dev_stack.rollout("oracle-1", endpoint=dev_stack.oracle_url, task=1)
    dev_stack.rollout("null-1", endpoint=null_policy, task=1)
    oracle = dev_stack.wait_phase("oracle-1", TERMINAL)
    null = dev_stack.wait_phase("null-1", TERMINAL)
    assert oracle["phase"] == "Succeeded", dump(oracle)
    assert oracle["result"]["exitStatus"] == "submitted"
    assert oracle["reward"]["value"] == 1.0 and oracle["reward"]["resolved"] is True
    assert oracle["reward"]["failToPassPassed"] == oracle["reward"]["failToPassTotal"] > 0
    assert null["phase"] == "Succeeded", dump(null)
    assert null["reward"]["value"] == 0.0 and null["reward"]["resolved"] is False

    trajectory = Trajectory.from_bytes(dev_stack.read_object(oracle["result"]["trajectory"]))
    assert trajectory.exit_status == "submitted"
    assert len(trajectory.response_ids) == len(trajectory.loss_mask) == len(trajectory.logprobs)
    assert sum(trajectory.loss_mask) > 0
    assert "diff --git" in trajectory.submission
    patch = dev_stack.read_object(oracle["result"]["patch"]).decode()
    assert patch == trajectory.submission
    # The policy's pod and the eval pod are gone once the reward is in.
    dev_stack.wait(
        "pods cleaned up",
        lambda: (
            not [
                p
                for p in dev_stack.kube.list(PODS, "default", label_selector=f"{api.LABEL_ROLLOUT}=oracle-1")["items"]
                if not p["metadata"].get("deletionTimestamp")
            ]
        ),
        timeout=60,
    )


def test_suspend_then_resume_on_the_same_pod(dev_stack: DevStack, slow_policy: str) -> None:
    post_json(f"{slow_policy}/update_weight_version", {"new_version": "v1"})
    _slow_rollout(dev_stack, "susp", slow_policy)
    pod_before = dev_stack.status("susp")["sandbox"]["podUID"]
    dev_stack.set_suspend("susp", True)
    aborted = dev_stack.wait_phase("susp", {"Aborted"}, timeout=60)
    partial = aborted["partial"]
    assert partial["reason"] == "Suspended"
    conditions = {c["type"]: c["status"] for c in aborted["conditions"]}
    assert conditions["Suspended"] == "True"
    snapshot = Snapshot.from_bytes(dev_stack.read_object(partial["snapshot"]))
    before = snapshot.buffer

    post_json(f"{slow_policy}/update_weight_version", {"new_version": "v2"})
    dev_stack.set_suspend("susp", False)
    done = dev_stack.wait_phase("susp", TERMINAL, timeout=240)
    assert done["phase"] == "Succeeded", dump(done)
    assert done["sandbox"]["podUID"] == pod_before, "resume must continue on the same live pod"
    assert done["attempts"] == 1

    trajectory = Trajectory.from_bytes(dev_stack.read_object(done["result"]["trajectory"]))
    full_ids = list(trajectory.prompt_ids) + list(trajectory.response_ids)
    # The resumed token list is the pre-abort list plus new tokens.
    assert full_ids[: len(before.input_ids)] == list(before.input_ids)
    assert len(full_ids) > len(before.input_ids)
    start = len(trajectory.prompt_ids)
    mask = np.array(trajectory.loss_mask)
    versions = list(trajectory.weight_versions)
    pre = [versions[i - start] for i in range(start, len(before.input_ids)) if mask[i - start]]
    post = [versions[i - start] for i in range(len(before.input_ids), len(full_ids)) if mask[i - start]]
    assert pre and set(pre) == {"v1"}, "tokens sampled before the abort keep their weight version"
    assert post and set(post) == {"v2"}, "tokens sampled after the resume carry the new weight version"


def _load(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/loads", timeout=30).json()["loads"][0])


def test_an_inference_side_abort_is_ridden_out_not_a_suspension(dev_stack: DevStack, slow_policy: str) -> None:
    _slow_rollout(dev_stack, "paused", slow_policy)
    post_json(f"{slow_policy}/pause_generation", {"mode": "abort"})
    try:
        # The runner re-sends the aborted turn; the paused server holds it.
        dev_stack.wait(
            "the re-sampled request waiting at the paused server",
            lambda: _load(slow_policy)["num_waiting_reqs"] >= 1,
            timeout=60,
        )
        assert dev_stack.status("paused")["phase"] == "Running"
        assert not dev_stack.get("paused")["spec"].get("suspend"), "only users write spec.suspend"
    finally:
        post_json(f"{slow_policy}/continue_generation", {})
    done = dev_stack.wait_phase("paused", TERMINAL, timeout=240)
    assert done["phase"] == "Succeeded", dump(done)
    assert done["progress"]["inferenceAborts"] >= 1, dump(done)
    assert "partial" not in done or not done["partial"], "an inference-side abort is not an abort of the rollout"
    # Progress is final: it agrees with the result.
    assert done["progress"]["turns"] == done["result"]["turns"], dump(done)


def test_abort_resume_and_inference_aborts_in_random_order_converge(dev_stack: DevStack, slow_policy: str) -> None:
    """The trainer's moves (abort, resume, pause/abort at the server, weight updates) in
    random order and timing over a batch: every member ends Succeeded with its reward."""
    batch = "races"
    names = [f"race-{i}" for i in range(3)]
    for name in names:
        dev_stack.rollout(name, endpoint=slow_policy, batch=batch, agent=SLOW_AGENT, inference=SLOW_INFERENCE)
    seed = int(os.environ.get("SWEROLLOUT_RACE_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    seed_note = f"(seed {seed}; SWEROLLOUT_RACE_SEED={seed} replays the moves)"
    version = 10
    with RolloutClient.connect(dev_stack.paths.kubeconfig, namespace="default") as client:
        for _ in range(12):
            move = rng.choice(["abort", "resume", "abort-resume", "server-abort", "server-pause", "weights"])
            if move == "abort":
                client.abort(batch)
            elif move == "resume":
                client.resume(batch)
            elif move == "abort-resume":  # the README's trainer sequence, no wait between
                client.abort(batch)
                version += 1
                post_json(f"{slow_policy}/update_weight_version", {"new_version": f"v{version}"})
                client.resume(batch)
            elif move == "server-abort":
                post_json(f"{slow_policy}/abort_request", {"rid": "", "abort_all": True})
            elif move == "server-pause":
                post_json(f"{slow_policy}/pause_generation", {"mode": "abort"})
                time.sleep(rng.uniform(0, 1.5))
                post_json(f"{slow_policy}/continue_generation", {})
            else:
                version += 1
                post_json(
                    f"{slow_policy}/update_weight_version", {"new_version": f"v{version}", "abort_all_requests": True}
                )
            time.sleep(rng.uniform(0, 2.0))
        client.resume(batch)
    for name in names:
        done = dev_stack.wait_phase(name, TERMINAL, timeout=400)
        assert done["phase"] == "Succeeded", f"{name} {seed_note}: {dump(done)}"
        assert done["reward"]["value"] is not None and done["result"]["turns"] >= 1, dump(done)
        assert done["progress"]["turns"] == done["result"]["turns"], dump(done)
        assert not dev_stack.get(name)["spec"].get("suspend"), f"{name}: the last intent was resume {seed_note}"
        assert done["attempts"] == 1, f"{name}: every resume continued on the same pod {seed_note}"
        trajectory = Trajectory.from_bytes(dev_stack.read_object(done["result"]["trajectory"]))
        assert len(trajectory.response_ids) == len(trajectory.loss_mask) == len(trajectory.logprobs)
        assert len(trajectory.weight_versions) == len(trajectory.response_ids)
        sampled = [v for v, m in zip(trajectory.weight_versions, trajectory.loss_mask) if m]
        assert sampled and all(v is not None for v in sampled), "every sampled token carries its weight version"


def test_pod_lost_while_aborted_is_replayed_into_a_fresh_pod(dev_stack: DevStack, slow_policy: str) -> None:
    _slow_rollout(dev_stack, "lost", slow_policy)
    dev_stack.set_suspend("lost", True)
    aborted = dev_stack.wait_phase("lost", {"Aborted"}, timeout=60)
    pod = aborted["sandbox"]["podName"]
    dev_stack.kube.delete(PODS, pod, "default")
    dev_stack.wait(
        "reclaimedAt", lambda: (dev_stack.status("lost").get("sandbox") or {}).get("reclaimedAt"), timeout=60
    )
    dev_stack.set_suspend("lost", False)
    done = dev_stack.wait_phase("lost", TERMINAL, timeout=300)
    assert done["phase"] == "Succeeded", dump(done)
    assert done["attempts"] == 2 and done["replay"] is True
    assert done["sandbox"]["podName"] != pod


def test_operator_sigkill_during_a_batch_finishes_each_rollout_exactly_once(
    dev_stack: DevStack, null_policy: str
) -> None:
    names = [f"batch-{i:02d}" for i in range(20)]
    seen_pods: set[str] = set()
    stop = threading.Event()

    def record_pods() -> None:
        with KubeClient.from_kubeconfig(dev_stack.paths.kubeconfig) as kube:
            while not stop.is_set():
                for pod in kube.list(PODS, "default", label_selector=f"{api.LABEL_BATCH}=kill")["items"]:
                    seen_pods.add(pod["metadata"]["name"])
                time.sleep(0.3)

    recorder = threading.Thread(target=record_pods, daemon=True)
    recorder.start()
    try:
        for i, name in enumerate(names):
            body = dev_stack.rollout(name, endpoint=null_policy, task=i % 5)
            dev_stack.kube.patch(SWEROLLOUTS, name, {"metadata": {"labels": {api.LABEL_BATCH: "kill"}}}, "default")
            assert body["metadata"]["name"] == name
        # Five kills (the chaos list): early, while pods start, and while the batch runs.
        for delay in (1.0, 3.0, 5.0, 8.0, 10.0):
            time.sleep(delay)
            operator = dev_stack.state().components["operator"]
            assert operator.pid
            os.kill(operator.pid, signal.SIGKILL)
            dev_stack.wait(
                "operator restarted",
                lambda old=operator.pid: (
                    (c := dev_stack.state().components["operator"]).pid not in (None, old) and c.alive()
                ),
                timeout=60,
            )
        finals = {name: dev_stack.wait_phase(name, TERMINAL, timeout=600) for name in names}
    finally:
        stop.set()
        recorder.join(timeout=10)
    for name, status in finals.items():
        assert status["phase"] == "Succeeded", f"{name}: {dump(status)}"
        assert status["attempts"] == 1, name
    # Deterministic names: one rollout pod per rollout, never a second attempt.
    assert {p for p in seen_pods if p.startswith("batch-")} <= {f"{n}-a1" for n in names}
    # Nothing leaked: pods gone; deleting the rollouts removes their Secrets and stored objects.
    dev_stack.wait(
        "batch pods deleted",
        lambda: not dev_stack.kube.list(PODS, "default", label_selector=f"{api.LABEL_BATCH}=kill")["items"],
        timeout=120,
    )
    uids = {name: dev_stack.get(name)["metadata"]["uid"] for name in names}
    for name in names:
        dev_stack.kube.delete(SWEROLLOUTS, name, "default")
    dev_stack.wait("rollouts deleted", lambda: all(dev_stack.get(n) is None for n in names), timeout=120)
    secrets = {s["metadata"]["name"] for s in dev_stack.kube.list(SECRETS, "default")["items"]}
    assert not {f"{n}-runner" for n in names} & secrets
    for uid in uids.values():
        assert not (dev_stack.store_dir / "default" / uid).exists() or not any(
            (dev_stack.store_dir / "default" / uid).rglob("*.*")
        )


def test_the_dev_example_runs_as_documented(dev_stack: DevStack) -> None:
    """examples/dev-rollout.yaml, applied with kubectl: only the machine-specific bits differ."""
    import yaml

    from tests.support.devstack import ROOT

    doc = yaml.safe_load((ROOT / "examples" / "dev-rollout.yaml").read_text())
    task_dir = doc["spec"]["instance"]["image"].removeprefix("file:///tmp/swerollout-tasks/")
    doc["spec"]["instance"]["image"] = f"file://{dev_stack.workdir / 'tasks' / task_dir}"
    if not dev_stack.oracle_url.endswith(":30000"):  # port 30000 was taken on this machine
        doc["spec"]["inference"]["endpoint"] = dev_stack.oracle_url
    kubectl = dev_stack.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    assert kubectl.returncode == 0, kubectl.stderr
    done = dev_stack.wait_phase(doc["metadata"]["name"], TERMINAL)
    assert done["phase"] == "Succeeded" and done["reward"]["value"] == 1.0, dump(done)


def test_cli_submit_watch_results_on_the_embedded_default(
    dev_stack: DevStack, null_policy: str, tmp_path: Path
) -> None:
    from tests.support.devstack import swerollout_cli

    tasks = dev_stack.workdir / "tasks" / "instances.jsonl"
    common = ["--kubeconfig", str(dev_stack.paths.kubeconfig), "--namespace", "default"]
    submit = swerollout_cli(
        "submit",
        "-f",
        str(tasks),
        "--group-size",
        "1",
        "--batch",
        "cli",
        "--endpoint",
        null_policy,
        "--tokenizer",
        "qwen-2.5",
        *common,
    )
    assert submit.returncode == 0, submit.stdout + submit.stderr
    watch = swerollout_cli("watch", "--batch", "cli", *common, timeout=600)
    assert watch.returncode == 0, watch.stdout + watch.stderr
    out = tmp_path / "cli.jsonl"
    results = swerollout_cli(
        "results", "--batch", "cli", "--out", str(out), "--store-url", f"file://{dev_stack.store_dir}", *common
    )
    assert results.returncode == 0, results.stdout + results.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(dev_stack.instances)
    assert all(row["reward"] == 0.0 for row in rows)


def test_max_sampled_tokens_ends_the_run_like_the_context_limit(dev_stack: DevStack, slow_policy: str) -> None:
    from swerollout.client.records import build_record

    # 24 tokens per turn: the budget of 40 is spent in the second turn, the third request is refused.
    inference = {**SLOW_INFERENCE, "maxSampledTokens": 40}
    dev_stack.rollout("budget", endpoint=slow_policy, agent=SLOW_AGENT, inference=inference)
    done = dev_stack.wait_phase("budget", TERMINAL, timeout=240)
    assert done["phase"] == "Succeeded", dump(done)
    assert done["result"]["exitStatus"] == "exit_context" and done["result"]["truncated"] is True
    trajectory = Trajectory.from_bytes(dev_stack.read_object(done["result"]["trajectory"]))
    assert "spec.inference.maxSampledTokens is 40" in trajectory.info["error"]
    assert trajectory.info["sampled_total"] == 40
    assert trajectory.info["kept_tokens"] + trajectory.info["dropped_total"] == 40
    assert trajectory.info["kept_tokens"] == sum(trajectory.loss_mask)
    record = build_record(dev_stack.get("budget") or {}, trajectory)
    assert record.sampled_tokens + record.dropped_tokens == 40
    assert record.summary()["dropped_tokens"] == record.dropped_tokens
    assert done["result"]["sampledTokens"] == record.sampled_tokens
    assert done["result"]["droppedTokens"] == record.dropped_tokens


def _routing_row(token: int) -> list[int]:
    from swerollout_dev.policy_server.engine import ROUTED_EXPERTS, ROUTED_LAYERS, ROUTED_TOP_K

    return [(token + layer * 3 + k) % ROUTED_EXPERTS for layer in range(ROUTED_LAYERS) for k in range(ROUTED_TOP_K)]


def test_batch_abort_keep_routed_experts_and_the_server_context_edge(dev_stack: DevStack, slow_oracle: str) -> None:
    """One batch on the stand-in in SGLang 0.5.23 mode proves four things:

    - abort(batch) reaches every runner mid-generation (exact-rid aborts), each rollout Aborted
      on its pod, by one write to the batch's SWERolloutBatch; resume(batch) continues each on
      that same pod;
    - onAbort Keep keeps the aborted request's tokens (v1) and the resumed one continues the
      same turn (v2): the tool call parses across both and the oracle's patch still resolves;
    - routed experts are stored one row per token, row p the server's routing of token p,
      the final (never forwarded) row zero filler;
    - a rollout against a server whose context its prompt nearly fills ends exit_context
      (SGLang admits prompts below min(ctx - 1, kv - 1) - 5 and caps the output to fit).
    """
    post_json(f"{slow_oracle}/update_weight_version", {"new_version": "v1"})
    batch = "sglang"
    members = {
        "keep": {"onAbort": "Keep", "returnRoutedExperts": True},
        "drop": {"returnRoutedExperts": True},
        "edge": {},
    }
    for task, (name, inference) in enumerate(members.items()):
        dev_stack.rollout(name, endpoint=slow_oracle, task=task, batch=batch, inference=inference)
    dev_stack.wait(
        "every member generating", lambda: _load(slow_oracle)["num_running_reqs"] >= len(members), timeout=300
    )
    used = _load(slow_oracle)["num_used_tokens"]
    dev_stack.wait("tokens sampled", lambda: _load(slow_oracle)["num_used_tokens"] >= used + 60, timeout=60)
    pods = {name: dev_stack.status(name)["sandbox"]["podUID"] for name in members}
    with RolloutClient.connect(dev_stack.paths.kubeconfig, namespace="default") as client:
        assert client.abort(batch) == sorted(members)
        aborted = {name: dev_stack.wait_phase(name, {"Aborted"}, timeout=120) for name in members}
        assert all(a["partial"]["reason"] == "Suspended" for a in aborted.values()), dump(aborted)
        assert {name: a["sandbox"]["podUID"] for name, a in aborted.items()} == pods, "aborted on their pods"
        # One write to the batch object suspended them: no member's own spec.suspend was set.
        assert not any(dev_stack.get(name)["spec"].get("suspend") for name in members)
        batch_object = dev_stack.kube.get(SWEROLLOUTBATCHES, batch, "default")
        assert batch_object["spec"]["suspend"] is True
        kept = Snapshot.from_bytes(dev_stack.read_object(aborted["keep"]["partial"]["snapshot"])).buffer
        dropped = Snapshot.from_bytes(dev_stack.read_object(aborted["drop"]["partial"]["snapshot"])).buffer
        assert kept.sampled_tokens > 0 and set(kept.weight_versions[kept.prompt_length :]) == {"v1"}
        assert dropped.sampled_tokens == 0 and len(dropped) == dropped.prompt_length

        # The same task's prompt (its size known from the aborted member) against a server
        # whose context it nearly fills; a new rollout (a dev pod reaches only the endpoint
        # it started with), running while the batch resumes.
        prompt = aborted["edge"]["partial"]["tokens"]
        with launch(
            "oracle",
            subprocess=True,
            tokenizer="qwen-2.5",
            tasks=dev_stack.workdir / "tasks" / "instances.jsonl",
            context_length=prompt + 12,
        ) as edge:
            dev_stack.rollout("ctx-edge", endpoint=edge.url, task=2, batch="sglang-edge")
            post_json(f"{slow_oracle}/update_weight_version", {"new_version": "v2"})
            assert client.resume(batch, weight_version="v2") == sorted(members)
            done = {name: dev_stack.wait_phase(name, TERMINAL, timeout=300) for name in members}
            at_edge = dev_stack.wait_phase("ctx-edge", TERMINAL, timeout=300)
    assert at_edge["phase"] == "Succeeded", dump(at_edge)
    assert at_edge["result"]["exitStatus"] == "exit_context" and at_edge["result"]["truncated"] is True
    for name in ("keep", "drop"):
        assert done[name]["phase"] == "Succeeded" and done[name]["reward"]["value"] == 1.0, dump(done[name])
        trajectory = Trajectory.from_bytes(dev_stack.read_object(done[name]["result"]["trajectory"]))
        ids = [*trajectory.prompt_ids, *trajectory.response_ids]
        rows = trajectory.routed_experts_array()
        assert rows is not None and rows.shape == (len(ids), 4), name
        assert trajectory.routed_experts_forwarded == len(ids) - 1, name
        assert rows[:-1].tolist() == [_routing_row(t) for t in ids[:-1]], f"{name}: row p is token p's routing"
        assert not rows[-1].any()
        assert done[name]["result"]["sampledTokens"] == sum(trajectory.loss_mask)
        assert done[name]["result"]["droppedTokens"] == trajectory.info["dropped_total"]
    keep = Trajectory.from_bytes(dev_stack.read_object(done["keep"]["result"]["trajectory"]))
    first = keep.info["mixed_version_turns"][0]
    assert first["start"] == 0 and first["versions"] == ["v1", "v2"], keep.info["mixed_version_turns"]
    assert keep.weight_versions[: kept.sampled_tokens] == ["v1"] * kept.sampled_tokens
    assert done["keep"]["result"]["droppedTokens"] == 0
    drop = Trajectory.from_bytes(dev_stack.read_object(done["drop"]["result"]["trajectory"]))
    assert done["drop"]["result"]["droppedTokens"] > 0 and drop.info["mixed_version_turns"] == []
    assert done["edge"]["phase"] == "Succeeded" and done["edge"]["reward"]["value"] == 1.0, dump(done["edge"])
    for name in members:
        assert done[name]["sandbox"]["podUID"] == pods[name] and done[name]["attempts"] == 1, dump(done[name])


@pytest.fixture(scope="module")
def wordkit(dev_stack: DevStack) -> Iterator[tuple[str, SWEBenchInstance]]:
    """A dev-mode task whose tests import inflection, which our venv lacks, and an oracle that knows it."""
    dest = dev_stack.workdir / "tasks-with-requirements"
    (instance,) = materialize_tasks(dest, ROOT / "examples" / "tasks-with-requirements")
    with launch("oracle", subprocess=True, tokenizer="qwen-2.5", tasks=dest / "instances.jsonl") as server:
        yield server.url, instance


def test_a_dev_mode_task_with_requirements_runs_in_its_own_environment(
    dev_stack: DevStack, wordkit: tuple[str, SWEBenchInstance]
) -> None:
    """The node agent builds the task's environment from the requirements its image carries and
    puts it first on the sandbox's PATH: the agent's and the eval's tests import inflection."""
    url, instance = wordkit
    assert importlib.util.find_spec("inflection") is None, "the test needs a package our venv lacks"
    dev_stack.rollout("wordkit-1", endpoint=url, task=instance)
    status = dev_stack.wait_phase("wordkit-1", TERMINAL, timeout=600)
    assert status["phase"] == "Succeeded", dump(status)
    assert status["reward"]["value"] == 1.0 and status["reward"]["resolved"] is True, dump(status)
    assert status["reward"]["failToPassPassed"] == status["reward"]["failToPassTotal"] == 2
