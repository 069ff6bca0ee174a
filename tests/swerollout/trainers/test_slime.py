"""The slime hooks (swerollout.trainers.slime) on records of the real API server, the
operator's part played by tests.support.client_support; slime's ``Sample`` is a double
whose fields are checked against slime's own source (a fixture)."""

from __future__ import annotations

import ast
import asyncio
from argparse import Namespace
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from swerollout.client import AsyncRolloutClient, ClientConfigError, TrainerStatus
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout.store import ResultStore
from swerollout.trainers import slime
from swerollout.trainers._records import TrainerAdapterError
from swerollout.trainers._settings import AdapterSettings
from swerollout.wire.trajectory import Trajectory
from tests.support.client_fixtures import client, crd, store, store_url  # noqa: F401 (fixtures)
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory
from tests.support.slime_double import DataSource, Sample
from tests.swerollout.trainers.conftest import Stack

FIXTURE = Path(__file__).parent / "fixtures" / "slime_sample.py.txt"
DOUBLE = Path(__file__).parents[2] / "support" / "slime_double.py"
LAYERS, TOP_K = 3, 2


def _sample_class(path: Path) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    """(name, annotation, default) of each field of class Sample, and its Status members."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Sample")
    fields = [
        (n.target.id, ast.unparse(n.annotation), ast.unparse(n.value) if n.value else "")
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    status = next(n for n in cls.body if isinstance(n, ast.ClassDef) and n.name == "Status")
    members = {
        n.targets[0].id: ast.literal_eval(n.value)
        for n in status.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    return fields, members


def test_the_double_carries_slimes_sample_fields_exactly() -> None:
    slime_fields, slime_status = _sample_class(FIXTURE)
    double_fields, double_status = _sample_class(DOUBLE)
    assert double_fields == slime_fields
    assert (
        double_status
        == slime_status
        == {
            "PENDING": "pending",
            "COMPLETED": "completed",
            "TRUNCATED": "truncated",
            "ABORTED": "aborted",
            "FAILED": "failed",
        }
    )
    # The adapter maps our statuses onto slime's by value.
    assert {s.value for s in TrainerStatus} <= set(slime_status.values())


SETTINGS: dict[str, Any] = {
    "endpoints": [INFERENCE["endpoint"]],
    "tokenizer": INFERENCE["tokenizer"],
    "timeout_seconds": 120,
}


def _adapter(prefix: str, client: AsyncRolloutClient) -> slime.SlimeAdapter:
    """An adapter on the test's client; its rollouts are ``<prefix>-x-<group_index>-<index>``."""
    settings = AdapterSettings.model_validate({**SETTINGS, "batch_prefix": prefix})
    return slime.SlimeAdapter(settings, client=client, run_id="x")


def _args(**extra: Any) -> Namespace:
    values: dict[str, Any] = dict(
        rollout_batch_size=1,
        n_samples_per_prompt=2,
        partial_rollout=True,
        over_sampling_batch_size=3,
        moe_router_topk=TOP_K,
        rollout_temperature=0.7,
        rollout_top_p=0.9,
        rollout_top_k=0,
        rollout_max_response_len=3000,
    )
    return Namespace(**{**values, **extra})


def _trajectory(seed: int, exit_status: str = "submitted") -> Trajectory:
    """A trajectory with a turn log (one entry per /generate call, one of them dropped)
    and MoE routing rows, as the runner writes them."""
    t = make_trajectory(seed, exit_status)
    rows = len(t.prompt_ids) + len(t.response_ids)  # one row per token (trajectory schema v3)
    routing = np.arange(rows * LAYERS * TOP_K, dtype="<i4")
    turn_log = [
        {"rid": "a", "finish": "stop", "sampled": 3, "kept": True, "weight_version": "4"},
        {"rid": "b", "finish": "abort", "sampled": 2, "kept": False, "weight_version": "4"},
        {"rid": "c", "finish": "stop", "sampled": 5, "kept": True, "weight_version": "5"},
        {"rid": "d", "finish": "stop", "sampled": 1, "kept": True, "weight_version": None},
    ]
    return Trajectory.model_validate(
        {
            **t.model_dump(),
            "routed_experts": routing.tobytes(),
            "routed_experts_width": LAYERS * TOP_K,
            "routed_experts_forwarded": rows - 1,
            "info": {"turn_log": turn_log},
        }
    )


def test_settings_come_from_slimes_args() -> None:
    """slime passes ``args``: the ``swerollout:`` section of its --custom-config-path YAML,
    with the router and --hf-checkpoint as defaults."""
    section = {"tokenizer": "qwen-3", "namespace": "rl", "store_url": "s3://bucket/p", "batch_prefix": "run7"}
    args = Namespace(swerollout=section, sglang_router_ip="10.0.3.7", sglang_router_port=30000, hf_checkpoint="/m")
    settings = slime.settings_from_slime(args)
    assert settings.endpoints == ["http://10.0.3.7:30000"] and settings.tokenizer == "qwen-3"
    assert (settings.namespace, settings.store_url, settings.batch_prefix) == ("rl", "s3://bucket/p", "run7")
    adapter = slime.SlimeAdapter.from_args(args)
    assert adapter.batch == f"run7-{adapter.run_id}" and adapter.client is None

    explicit = slime.settings_from_slime(
        Namespace(
            swerollout={"endpoints": ["http://a:1"]},
            sglang_router_ip="r",
            sglang_router_port=1,
            hf_checkpoint="/models/q",
        )
    )
    assert explicit.endpoints == ["http://a:1"] and explicit.tokenizer == "/models/q"
    with pytest.raises(ClientConfigError, match=r"`swerollout:` section .*endpoints"):
        slime.settings_from_slime(Namespace(hf_checkpoint="/m"))
    with pytest.raises(ClientConfigError, match="batch_prefix"):
        slime.settings_from_slime(Namespace(swerollout={**section, "endpoints": ["http://a:1"], "batch_prefix": "A_b"}))
    with pytest.raises(ClientConfigError, match="must be a mapping"):
        slime.settings_from_slime(Namespace(swerollout="http://a:1"))


def test_the_rollout_function_refuses_evaluations_and_wrong_group_sizes() -> None:
    adapter = slime.SlimeAdapter(AdapterSettings.model_validate(SETTINGS))
    with pytest.raises(ClientConfigError, match="--eval-function-path"):
        adapter.generate_rollout(_args(), 0, DataSource([instance(0)], group_size=2), evaluation=True)
    with pytest.raises(ClientConfigError, match=r"groups of \[3\] samples, not --n-samples-per-prompt=2"):
        adapter.generate_rollout(_args(), 0, DataSource([instance(0)], group_size=3))
    assert adapter.client is None, "nothing was connected"


async def _play(
    akube: AsyncKubeClient,
    store: ResultStore,
    namespace: str,
    outcomes: dict[str, tuple[str, str]],
    sent: dict[str, Trajectory],
) -> None:
    """Finish each named rollout (exit status, phase) once it exists and is not suspended
    (a suspended rollout does not run), in the given order."""
    pending = dict(outcomes)
    while pending:
        existing = {
            o["metadata"]["name"]
            for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
            if not o["spec"].get("suspend")
        }
        name = next(iter(pending))
        if name in existing:
            exit_status, phase = pending.pop(name)
            sent[name] = _trajectory(len(sent), exit_status)
            await finish(
                akube,
                store,
                namespace,
                name,
                trajectory=sent[name],
                phase=phase,
                reward=1.0 if exit_status == "submitted" else 0.0,
            )
            continue
        await asyncio.sleep(0.1)


async def test_generate_maps_a_record_onto_slimes_sample(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    adapter = _adapter("sl", client)
    samples = [Sample(group_index=4, index=8 + m, metadata={"instance": instance(4)}) for m in range(3)]
    sent: dict[str, Trajectory] = {}
    outcomes = {
        "sl-x-4-8": ("submitted", "Succeeded"),
        "sl-x-4-9": ("exit_context", "Succeeded"),
        "sl-x-4-10": ("exit_error", "Failed"),
    }
    player = asyncio.create_task(_play(akube, store, namespace, outcomes, sent))
    params = {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "max_new_tokens": 3000}
    out = await asyncio.gather(*(adapter.generate(_args(), s, params) for s in samples))
    await player
    assert out == samples

    obj = await akube.get(SWEROLLOUTS, "sl-x-4-8", namespace)
    assert obj["spec"]["inference"]["maxSampledTokens"] == 3000
    assert obj["spec"]["inference"]["sampling"] == {
        **obj["spec"]["inference"]["sampling"],
        "temperature": 0.7,
        "topP": 0.9,
        "topK": -1,
    }
    for sample in samples:
        t = sent[sample.metadata[slime.META_ROLLOUT]]
        assert sample.tokens == t.prompt_ids + t.response_ids
        assert sample.response_length == len(t.response_ids)
        assert sample.loss_mask == t.loss_mask and len(sample.rollout_log_probs or []) == sample.response_length
        assert sample.rollout_log_probs == pytest.approx(t.logprobs)
        assert sample.weight_versions == ["4", "5", "default"], "one entry per generate call whose tokens are kept"
        experts = sample.rollout_routed_experts
        assert isinstance(experts, np.ndarray) and experts.shape == (len(sample.tokens) - 1, LAYERS, TOP_K)
        assert experts.reshape(-1).tolist() == list(range(experts.size)), "SGLang's rows, the final token's left out"
        assert sample.metadata["trainer_labels"] == {"group_index": 4, "index": sample.index}
    assert [s.status for s in samples] == [Sample.Status.COMPLETED, Sample.Status.TRUNCATED, Sample.Status.FAILED]
    assert [s.remove_sample for s in samples] == [False, False, True]
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0]

    # A finished sample handed in again is not run again.
    assert await adapter.generate(_args(), samples[0], params) is samples[0]
    # Routing without slime's top-k fails loudly instead of guessing the layer count.
    with pytest.raises(TrainerAdapterError, match="moe-router-topk"):
        slime.fill_sample(Sample(), await client.record(obj), top_k=None)


async def test_partial_rollout_returns_running_groups_and_resumes_them_by_name(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    adapter = _adapter("pr", client)
    source = DataSource([instance(i) for i in range(3)], group_size=2)
    groups = source.get_samples(3)
    sent: dict[str, Trajectory] = {}
    # One member of group 2 finishes, then group 1; groups 0 and 2 are still running then.
    player = asyncio.create_task(
        _play(
            akube,
            store,
            namespace,
            {
                "pr-x-2-4": ("submitted", "Succeeded"),
                "pr-x-1-2": ("submitted", "Succeeded"),
                "pr-x-1-3": ("exit_format", "Succeeded"),
            },
            sent,
        )
    )
    finished, left = await asyncio.wait_for(adapter.rollout_groups(_args(), groups, 1), timeout=120)
    await player
    assert finished == [groups[1]] and left == [groups[0], groups[2]]
    assert [s.status for s in groups[1]] == [Sample.Status.COMPLETED, Sample.Status.COMPLETED]
    assert [s.status for s in groups[0]] == [Sample.Status.ABORTED, Sample.Status.ABORTED]
    # pr-x-2-4 finished first: filled, or (its result not yet read when the step ended) marked
    # ABORTED and picked up by name next step. Either way it is never suspended.
    assert groups[2][0].status in (Sample.Status.COMPLETED, Sample.Status.ABORTED)
    assert groups[2][1].status is Sample.Status.ABORTED
    suspend = {o["metadata"]["name"]: o["spec"]["suspend"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"]}
    assert suspend == {
        "pr-x-0-0": True,
        "pr-x-0-1": True,
        "pr-x-1-2": False,
        "pr-x-1-3": False,
        "pr-x-2-4": False,
        "pr-x-2-5": True,
    }

    # Next step: slime hands the buffered groups out again; the aborted members resume by name.
    source.add_samples(left)
    again = source.get_samples(2)
    assert again == [groups[0], groups[2]]
    player = asyncio.create_task(
        _play(
            akube, store, namespace, {n: ("submitted", "Succeeded") for n in ("pr-x-0-0", "pr-x-0-1", "pr-x-2-5")}, sent
        )
    )
    finished, left = await asyncio.wait_for(adapter.rollout_groups(_args(), again, 2), timeout=120)
    await player
    assert finished == again and left == []
    assert all(s.status is Sample.Status.COMPLETED for g in again for s in g)
    suspend = {o["metadata"]["name"]: o["spec"]["suspend"] for o in (await akube.list(SWEROLLOUTS, namespace))["items"]}
    assert suspend["pr-x-0-0"] is False and suspend["pr-x-2-5"] is False
    assert len((await akube.list(SWEROLLOUTS, namespace))["items"]) == 6, "resumed, not submitted again"


def test_the_rollout_function_runs_steps_on_its_own_loop(crd: Any, namespace: str, store_url: str) -> None:
    """generate_rollout is synchronous (slime's rollout manager calls it step after step)."""
    adapter = slime.SlimeAdapter(
        AdapterSettings.model_validate(
            {
                **SETTINGS,
                "batch_prefix": "gr",
                "kubeconfig": str(crd.kubeconfig_path),
                "namespace": namespace,
                "store_url": store_url,
            }
        ),
        run_id="x",
    )
    source = DataSource([instance(0)], group_size=2)
    sent: dict[str, Trajectory] = {}

    async def play() -> None:
        from swerollout.store import open_store

        async with crd.admin_async_client() as kube:
            opened = open_store(store_url)
            try:
                await _play(
                    kube,
                    opened,
                    namespace,
                    {"gr-x-0-0": ("submitted", "Succeeded"), "gr-x-0-1": ("submitted", "Succeeded")},
                    sent,
                )
            finally:
                await opened.aclose()

    import threading

    player = threading.Thread(target=asyncio.run, args=(play(),))
    player.start()
    try:
        groups = adapter.generate_rollout(_args(partial_rollout=False), 0, source)
    finally:
        player.join(timeout=120)
        adapter.close()
    assert len(groups) == 1 and [s.status for s in groups[0]] == [Sample.Status.COMPLETED] * 2
    assert source.buffer == []


def _load(url: str) -> dict[str, Any]:
    """The server's scheduler load (SGLang's /v1/loads, as slime reads it)."""
    return dict(httpx.get(f"{url}/v1/loads", timeout=30).json()["loads"][0])


async def _until(what: str, probe: Callable[[], bool], task: asyncio.Task[Any], timeout: float = 300) -> None:
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(probe):
            if task.done():
                task.result()
                raise AssertionError(f"the rollout ended before {what}")
            await asyncio.sleep(0.2)


async def test_generate_rides_slimes_weight_update_and_step_end_abort_by_itself(stack: Stack, slow_oracle: str) -> None:
    """slime pauses its engines around a weight update and aborts everything in flight at
    the end of a step, talking to SGLang only. The generate function's rollout rides both
    out with no call to the client: Succeeded with reward 1, tokens of both versions."""
    settings = stack.settings(endpoints=[slow_oracle], batch_prefix="slab", inference={"onAbort": "Keep"})
    async with settings.connect() as client:
        await _ride_out(slime.SlimeAdapter(settings, client=client), client, stack, slow_oracle)


async def _ride_out(adapter: slime.SlimeAdapter, client: AsyncRolloutClient, stack: Stack, slow_oracle: str) -> None:
    sample = Sample(group_index=0, index=0, metadata=stack.instance_row(0))
    post = partial(httpx.post, timeout=30)
    post(f"{slow_oracle}/update_weight_version", json={"new_version": "1"}).raise_for_status()
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 8192}
    task = asyncio.create_task(adapter.generate(_args(), sample, params))
    used = _load(slow_oracle)["num_used_tokens"]
    await _until("it sampled", lambda: _load(slow_oracle)["num_used_tokens"] >= used + 8, task)
    # slime's weight update (update_weight_from_disk): pause, load with the new version, continue.
    post(f"{slow_oracle}/pause_generation", json={}).raise_for_status()
    post(
        f"{slow_oracle}/update_weights_from_disk", json={"model_path": "/ckpt/weight_v000002", "weight_version": "2"}
    ).raise_for_status()
    post(f"{slow_oracle}/continue_generation", json={}).raise_for_status()
    used = _load(slow_oracle)["num_used_tokens"]
    await _until("it sampled again", lambda: _load(slow_oracle)["num_used_tokens"] >= used + 8, task)
    # slime's end of a step (abort_servers_until_idle): abort everything in flight.
    post(f"{slow_oracle}/abort_request", json={"abort_all": True}).raise_for_status()

    filled = await asyncio.wait_for(task, timeout=600)
    name = sample.metadata[slime.META_ROLLOUT]
    record = await client.result(name, timeout=60)
    obj = await client.get_rollout(name)
    assert filled is sample and sample.status is Sample.Status.COMPLETED and not sample.remove_sample
    assert sample.reward == 1.0 and record.reward == 1.0 and record.resolved
    assert record.phase.value == "Succeeded" and record.attempts == 1
    assert not obj["spec"].get("suspend"), "nothing suspended the rollout"
    assert obj["status"]["progress"]["inferenceAborts"] >= 2
    assert set(record.weight_versions[record.loss_mask == 1].tolist()) == {"1", "2"}
    assert sample.weight_versions[0] == "1" and set(sample.weight_versions) == {"1", "2"}
    assert sample.tokens == record.prompt_ids.tolist() + record.response_ids.tolist()
