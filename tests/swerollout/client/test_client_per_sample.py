"""Per-sample use of the client against the real API server (the operator's part is
played by tests.support.client_support): submit_one, result(name) over one shared
watch, abort/resume/delete by names, and the record fields trainers read."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

from swerollout.api.v1alpha1 import LABEL_BATCH, LABEL_GROUP_SIZE, Phase
from swerollout.client import (
    ANNOTATION_TRAINER_LABELS,
    AsyncRolloutClient,
    ClientConfigError,
    ClientError,
    RolloutClient,
    RolloutNotFound,
    TrainerStatus,
    WaitTimeout,
    align_routed_experts,
)
from swerollout.client.records import versions_to_int
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout.store import Owner, ResultStore, open_store
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.controlplane import ControlPlane
from swerollout_operator.podspec import pod_group
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory, now, run, set_status

WIDTH = 4  # 2 layers x top-2, as the stand-in policy server reports


def routed(trajectory: Trajectory, rows: int) -> Trajectory:
    """The trajectory with ``rows`` routing rows whose values name their row."""
    values = np.repeat(np.arange(rows, dtype="<i4"), WIDTH)
    # model_copy does not validate: other row counts than the runner's are built on purpose.
    return trajectory.model_copy(
        update={
            "routed_experts": values.tobytes(),
            "routed_experts_width": WIDTH,
            "routed_experts_forwarded": rows - 1,
        }
    )


def with_int_versions(seed: int, exit_status: str = "submitted") -> Trajectory:
    t = make_trajectory(seed, exit_status)
    return t.model_copy(update={"weight_versions": [("7" if m else None) for m in t.loss_mask]})


async def test_submit_one_and_result_share_one_watch(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    watches = 0
    real_watch = client.kube.watch

    def counting_watch(*args: Any, **kwargs: Any) -> Any:
        nonlocal watches
        watches += 1
        return real_watch(*args, **kwargs)

    client.kube.watch = counting_watch  # type: ignore[method-assign]
    names = [
        await client.submit_one(
            instance(s),
            batch="one",
            sample=s,
            member=m,
            inference=INFERENCE,
            weight_version="7",
            max_sampled_tokens=5000,
            trainer_labels={"uid": f"u-{s}", "index": s * 2 + m},
        )
        for s in range(3)
        for m in range(2)
    ]
    assert names == [f"one-{s}-{m}" for s in range(3) for m in range(2)]
    # The same call again is a no-op (server-side apply), as for submit_batch.
    assert (
        await client.submit_one(
            instance(0),
            batch="one",
            sample=0,
            inference=INFERENCE,
            weight_version="7",
            max_sampled_tokens=5000,
            trainer_labels={"uid": "u-0", "index": 0},
        )
        == "one-0-0"
    )
    obj = await akube.get(SWEROLLOUTS, "one-2-1", namespace)
    assert LABEL_GROUP_SIZE not in obj["metadata"]["labels"], "a hook that does not know its group admits alone"
    assert obj["spec"]["inference"]["maxSampledTokens"] == 5000
    assert obj["spec"]["inference"]["weightVersion"] == "7"
    assert obj["metadata"]["labels"][LABEL_BATCH] == "one"
    assert obj["metadata"]["annotations"][ANNOTATION_TRAINER_LABELS] == '{"index":5,"uid":"u-2"}'

    waiting = [asyncio.create_task(client.result(n, timeout=120)) for n in names]
    sent: dict[str, Trajectory] = {}
    for i, name in enumerate(reversed(names)):  # finish in another order than waited for
        trajectory = with_int_versions(i, "exit_context" if name == "one-1-0" else "submitted")
        sent[name] = routed(trajectory, len(trajectory.prompt_ids) + len(trajectory.response_ids))
        await finish(akube, store, namespace, name, trajectory=sent[name], reward=float(i % 2), resolved=bool(i % 2))
    records = await asyncio.gather(*waiting)
    assert watches == 1, "every result() of a client is served by one watch"

    for name, record in zip(names, records):
        trajectory = sent[name]
        _, sample, member = name.rsplit("-", 2)
        assert record.name == name
        assert record.trainer_labels == {"uid": f"u-{sample}", "index": int(sample) * 2 + int(member)}
        assert record.tokens.tolist() == trajectory.prompt_ids + trajectory.response_ids
        assert record.truncated is (name == "one-1-0")
        assert record.status is (TrainerStatus.TRUNCATED if name == "one-1-0" else TrainerStatus.COMPLETED)
        versions = record.versions_as_int()
        assert versions.dtype == np.int64 and versions.shape == record.response_ids.shape
        assert versions.tolist() == [7 if m else -1 for m in trajectory.loss_mask]
        assert record.versions_as_int(default=0).tolist() == [7 if m else 0 for m in trajectory.loss_mask]
        experts = record.routed_experts
        assert experts is not None and experts.dtype == np.int32
        assert experts.shape == (len(record.tokens), WIDTH)
        assert experts[:, 0].tolist() == list(range(len(record.tokens))), "row i routes token i"
        assert record.generated_tokens == len(trajectory.response_ids)
        assert record.to_dict()["trainer_labels"] == record.trainer_labels


async def test_result_of_a_missing_or_deleted_rollout_and_a_timeout(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    with pytest.raises(RolloutNotFound, match="no-such-0-0"):
        await client.result("no-such-0-0", timeout=60)
    await client.submit_one(instance(0), batch="gone", sample=0, inference=INFERENCE)
    with pytest.raises(WaitTimeout, match="gone-0-0"):
        await client.result("gone-0-0", timeout=0.5)
    waiting = asyncio.create_task(client.result("gone-0-0", timeout=120))
    await run(akube, namespace, "gone-0-0")
    assert await client.delete(["gone-0-0", "never-0-0"]) == ["gone-0-0"]
    with pytest.raises(RolloutNotFound):
        await waiting
    assert (await akube.list(SWEROLLOUTS, namespace))["items"] == []
    assert await client.delete(["gone-0-0"]) == []


async def test_abort_and_resume_by_names(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0), instance(1)], 2, batch="nm", inference=INFERENCE, weight_version="3")
    for name in ("nm-0-0", "nm-0-1", "nm-1-0"):
        await run(akube, namespace, name)
    await finish(akube, store, namespace, "nm-1-1", trajectory=make_trajectory(1))

    assert await client.abort(names=["nm-0-0", "nm-1-1", "nm-0-0"]) == ["nm-0-0"]  # finished members are left alone
    suspend = {
        o["metadata"]["name"]: o["spec"].get("suspend") for o in (await akube.list(SWEROLLOUTS, namespace))["items"]
    }
    assert suspend == {"nm-0-0": True, "nm-0-1": False, "nm-1-0": False, "nm-1-1": False}

    # The runner reports the abort; the record carries where it stopped.
    obj = await akube.get(SWEROLLOUTS, "nm-0-0", namespace)
    snapshot = await store.put(Owner(namespace=namespace, uid=obj["metadata"]["uid"]), "snapshot", b"state")
    await set_status(
        akube,
        namespace,
        "nm-0-0",
        {
            "phase": "Aborted",
            "partial": {
                "snapshot": {"ref": snapshot.ref, "sha256": snapshot.sha256, "bytes": snapshot.bytes},
                "turns": 2,
                "tokens": 345,
                "weightVersion": "3",
                "abortedAt": now(),
                "reason": "Suspended",
            },
        },
    )
    record = await client.record(await client.get_rollout("nm-0-0"))
    assert record.status is TrainerStatus.ABORTED and record.phase is Phase.ABORTED
    assert record.partial is not None
    assert (record.partial.turns, record.partial.tokens, record.partial.weight_version) == (2, 345, "3")
    assert record.partial.reason == "Suspended"
    assert record.response_ids.size == 0 and record.routed_experts is None
    assert record.to_dict()["partial"]["tokens"] == 345

    assert await client.resume(names=["nm-0-0", "nm-0-1"], weight_version="4") == ["nm-0-0"]
    obj = await akube.get(SWEROLLOUTS, "nm-0-0", namespace)
    assert obj["spec"]["suspend"] is False and obj["spec"]["inference"]["weightVersion"] == "4"
    other = await akube.get(SWEROLLOUTS, "nm-0-1", namespace)
    assert other["spec"]["inference"]["weightVersion"] == "3", "a member that was not resumed keeps its version"

    with pytest.raises(ClientConfigError, match="exactly one"):
        await client.abort("nm", names=["nm-0-0"])
    with pytest.raises(ClientConfigError, match="exactly one"):
        await client.resume()
    with pytest.raises(RolloutNotFound, match="nm-9-9"):
        await client.abort(names=["nm-9-9"])
    with pytest.raises(ClientConfigError, match="weight_version"):
        await client.resume(names=["nm-0-0"], weight_version="x" * 200)


async def test_submit_one_with_its_group_size_makes_the_group_one_pod_group(
    client: AsyncRolloutClient, akube: AsyncKubeClient, namespace: str
) -> None:
    """A per-sample hook that knows its group's size gets what submit_batch
    gets: the size label that makes the operator put the members' pods into one Kueue pod group."""
    for member in range(3):
        await client.submit_one(instance(1), batch="grp", sample=4, member=member, group_size=3, inference=INFERENCE)
    groups = set()
    for member in range(3):
        meta = (await akube.get(SWEROLLOUTS, f"grp-4-{member}", namespace))["metadata"]
        assert meta["labels"][LABEL_GROUP_SIZE] == "3"
        groups.add(pod_group(meta))
    assert len(groups) == 1 and next(iter(groups))[1] == 3, groups


async def test_bad_per_sample_inputs_name_the_field(client: AsyncRolloutClient) -> None:
    with pytest.raises(ClientConfigError, match="maxSampledTokens"):
        await client.submit_one(instance(0), batch="bad", sample=0, inference=INFERENCE, max_sampled_tokens=0)
    with pytest.raises(ClientConfigError, match=r"trainer_labels\['ids'\]"):
        await client.submit_one(instance(0), batch="bad", sample=0, inference=INFERENCE, trainer_labels={"ids": [1]})  # type: ignore[dict-item]
    with pytest.raises(ClientConfigError, match="sample and member"):
        await client.submit_one(instance(0), batch="bad", sample=-1, inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="group_size must be greater than member"):
        await client.submit_one(instance(0), batch="bad", sample=0, member=2, group_size=2, inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="group_size must be greater than member"):
        await client.submit_one(instance(0), batch="bad", sample=0, group_size=0, inference=INFERENCE)
    with pytest.raises(ClientConfigError, match="one per instance"):
        await client.submit_batch([instance(0)], 1, batch="bad", inference=INFERENCE, trainer_labels=[{}, {}])


def test_the_blocking_client_serves_results_to_many_threads(crd: ControlPlane, namespace: str, store_url: str) -> None:
    with RolloutClient.connect(crd.kubeconfig_path, namespace=namespace, store_url=store_url) as client:
        names = [client.submit_one(instance(s), batch="thr", sample=s, inference=INFERENCE) for s in range(3)]
        got: dict[str, str] = {}

        def wait(name: str) -> None:
            got[name] = client.result(name, timeout=120).status.value

        threads = [threading.Thread(target=wait, args=(n,)) for n in names]
        for t in threads:
            t.start()

        asyncio.run(_with_kube(crd, namespace, store_url, names))
        for t in threads:
            t.join(timeout=180)
        assert got == {"thr-0-0": "completed", "thr-1-0": "failed", "thr-2-0": "completed"}
        assert client.delete(names) == names


async def _with_kube(crd: ControlPlane, namespace: str, store_url: str, names: list[str]) -> None:
    """Play the operator from another event loop than the client's portal."""
    async with crd.admin_async_client() as kube:
        store = open_store(store_url)
        try:
            for i, name in enumerate(names):
                await finish(
                    kube,
                    store,
                    namespace,
                    name,
                    trajectory=make_trajectory(i),
                    phase="Failed" if i == 1 else "Succeeded",
                )
        finally:
            await store.aclose()


def test_routed_experts_alignment_and_integer_versions() -> None:
    base = make_trajectory(3)
    n = len(base.prompt_ids) + len(base.response_ids)
    short = align_routed_experts(routed(base, n - 1))
    assert short is not None and short.shape == (n, WIDTH) and short[-1].tolist() == [0] * WIDTH
    full = align_routed_experts(routed(base, n))
    assert full is not None and full[:, 0].tolist() == list(range(n))
    assert align_routed_experts(base) is None
    with pytest.raises(ClientError, match=f"{n - 2} routed-expert rows for {n} tokens"):
        align_routed_experts(routed(base, n - 2))
    with pytest.raises(ClientError, match="'v1' .*not an integer"):
        versions_to_int(np.array([None, "3", "v1"], dtype=object))
    assert versions_to_int(np.array([None, "3", "12"], dtype=object), default=-5).tolist() == [-5, 3, 12]
