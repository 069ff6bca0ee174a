"""wait, stream_results and results against the real API server, with this test playing the operator."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from swerollout.client import (
    AsyncRolloutClient,
    BatchProgress,
    ClientConfigError,
    ResultUnavailable,
    RolloutClient,
    TrainerStatus,
    UnknownBatch,
    WaitTimeout,
)
from swerollout.kube import SWEROLLOUTS, AsyncKubeClient
from swerollout.store import ResultStore
from swerollout_dev.controlplane import ControlPlane
from tests.support.client_support import INFERENCE, finish, instance, make_trajectory, run, set_status


async def test_wait_reports_progress_and_returns_when_all_are_terminal(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0), instance(1)], 2, batch="w", inference=INFERENCE)
    seen: list[BatchProgress] = []
    first_report = asyncio.Event()

    def progress(state: BatchProgress) -> None:
        seen.append(state)
        first_report.set()

    waiter = asyncio.create_task(client.wait("w", progress=progress, timeout=60))
    await first_report.wait()
    await run(akube, namespace, "w-0-0", generated=40)
    await finish(akube, store, namespace, "w-0-1", trajectory=make_trajectory(1), reward=1.0)
    await finish(akube, store, namespace, "w-1-0", trajectory=make_trajectory(2), reward=0.0, resolved=False)
    await asyncio.sleep(0.3)
    assert not waiter.done()
    await finish(
        akube, store, namespace, "w-1-1", trajectory=make_trajectory(3), phase="Failed", reward=0.0, resolved=False
    )
    await finish(akube, store, namespace, "w-0-0", trajectory=make_trajectory(4))
    final = await waiter

    assert final.done and final.total == 4 and final.finished == 4 and final.failed == 1
    assert final.phases == {"Succeeded": 3, "Failed": 1}
    assert final.statuses == {"completed": 3, "failed": 1}, "watch counts what the client's records say"
    assert final.resolved == 2 and sorted(final.rewards) == [0.0, 0.0, 1.0, 1.0]
    assert seen[0].phases == {"Pending": 4} and seen[0].finished == 0
    assert any(s.phases.get("Running") == 1 and s.generated_tokens >= 40 for s in seen)
    finished_counts = [s.finished for s in seen]
    assert finished_counts == sorted(finished_counts) and finished_counts[-1] == 4


async def test_wait_gives_up_after_its_timeout(client: AsyncRolloutClient) -> None:
    await client.submit_batch([instance(0)], 1, batch="slow", inference=INFERENCE)
    with pytest.raises(WaitTimeout, match="abort --batch slow"):
        await client.wait("slow", timeout=0.5)


async def test_stream_results_yields_each_finished_rollout_once(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0)], 3, batch="s", inference=INFERENCE)
    await finish(akube, store, namespace, "s-0-2", trajectory=make_trajectory(20))
    got: list[str] = []
    stream = client.stream_results("s")
    first = await anext(stream)
    got.append(first.name)
    # Further status writes to a finished member must not yield it again.
    await set_status(akube, namespace, "s-0-2", {"message": "touched after completion"})
    await finish(akube, store, namespace, "s-0-0", trajectory=make_trajectory(21))
    await finish(akube, store, namespace, "s-0-1", trajectory=make_trajectory(22, "exit_context"))
    async for record in stream:
        got.append(record.name)
    assert got[0] == "s-0-2" and sorted(got) == ["s-0-0", "s-0-1", "s-0-2"]
    assert first.response_ids.tolist() == make_trajectory(20).response_ids


async def test_results_return_the_stored_arrays_and_a_trainer_status_per_outcome(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0), instance(1), instance(2)], 2, batch="r", inference=INFERENCE)
    outcomes = {
        "r-0-0": ("submitted", "Succeeded", TrainerStatus.COMPLETED),
        "r-0-1": ("exit_context", "Succeeded", TrainerStatus.TRUNCATED),
        "r-1-0": ("exit_format", "Succeeded", TrainerStatus.COMPLETED),
        "r-1-1": ("exit_environment_error", "Succeeded", TrainerStatus.FAILED),
        "r-2-0": ("submitted", "Failed", TrainerStatus.FAILED),
    }
    trajectories = {}
    for seed, (name, (exit_status, phase, _)) in enumerate(outcomes.items()):
        trajectories[name] = make_trajectory(seed, exit_status)
        # An ungraded infrastructure exit is failed even when Succeeded (an older operator wrote that).
        await finish(
            akube,
            store,
            namespace,
            name,
            trajectory=trajectories[name],
            phase=phase,
            reward=seed / 10,
            graded=exit_status != "exit_environment_error",
        )
    await set_status(akube, namespace, "r-2-1", {"phase": "Aborted"})

    records = await client.results("r")
    assert [r.name for r in records] == ["r-0-0", "r-0-1", "r-1-0", "r-1-1", "r-2-0", "r-2-1"]
    for seed, record in enumerate(records[:5]):
        trajectory = trajectories[record.name]
        assert record.status is outcomes[record.name][2]
        assert record.exit_status == outcomes[record.name][0]
        assert record.reward == pytest.approx(seed / 10) and record.resolved is True
        assert record.prompt_ids.dtype == np.int32 and record.loss_mask.dtype == np.uint8
        np.testing.assert_array_equal(record.prompt_ids, np.array(trajectory.prompt_ids))
        np.testing.assert_array_equal(record.response_ids, np.array(trajectory.response_ids))
        np.testing.assert_array_equal(record.loss_mask, np.array(trajectory.loss_mask))
        np.testing.assert_array_equal(record.logprobs, np.array(trajectory.logprobs, dtype=np.float32))
        assert record.weight_versions.tolist() == trajectory.weight_versions
        assert record.sampled_tokens == sum(trajectory.loss_mask)
        assert record.instance_id == f"demo__lib-{record.sample}"
    aborted = records[5]
    assert aborted.status is TrainerStatus.ABORTED and aborted.response_ids.size == 0 and aborted.reward is None


async def test_a_tampered_trajectory_is_refused(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0)], 1, batch="t", inference=INFERENCE)
    await finish(akube, store, namespace, "t-0-0", trajectory=make_trajectory(5))
    obj = await akube.get(SWEROLLOUTS, "t-0-0", namespace)
    path = obj["status"]["result"]["trajectory"]["ref"].removeprefix("file://")
    with open(path, "r+b") as fh:
        fh.seek(-1, 2)
        fh.write(b"\xff")
    with pytest.raises(ResultUnavailable, match="t-0-0"):
        await client.results("t")


async def test_results_without_a_store_or_operator_url_say_how_to_fix_it(
    crd: ControlPlane, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as bare:
        await bare.submit_batch([instance(0)], 1, batch="nostore", inference=INFERENCE)
        await finish(akube, store, namespace, "nostore-0-0", trajectory=make_trajectory(6))
        with pytest.raises(ClientConfigError, match="store_url="):
            await bare.results("nostore")


def test_the_sync_facade_runs_the_whole_cycle(crd: ControlPlane, namespace: str, store_url: str) -> None:
    with RolloutClient.connect(crd.kubeconfig_path, namespace=namespace, store_url=store_url) as client:
        names = client.submit_batch([instance(0)], 2, batch="sync", inference=INFERENCE)
        assert names == ["sync-0-0", "sync-0-1"]
        assert client.abort("sync") == names

        async def complete() -> None:
            async with crd.admin_async_client() as kube:
                from swerollout.store import open_store

                opened = open_store(store_url)
                for i, name in enumerate(names):
                    await finish(kube, opened, namespace, name, trajectory=make_trajectory(30 + i))
                await opened.aclose()

        asyncio.run(complete())
        assert client.wait("sync", timeout=30).done
        streamed = sorted(r.name for r in client.stream_results("sync"))
        assert streamed == names
        records = client.results("sync")
        assert [r.response_ids.tolist() for r in records] == [make_trajectory(30 + i).response_ids for i in range(2)]


async def test_deleted_members_leave_the_batch_and_a_deleted_batch_ends_wait(
    client: AsyncRolloutClient, akube: AsyncKubeClient, store: ResultStore, namespace: str
) -> None:
    await client.submit_batch([instance(0)], 2, batch="del", inference=INFERENCE)
    totals: list[int] = []
    listed = asyncio.Event()

    def progress(state: BatchProgress) -> None:
        totals.append(state.total)
        listed.set()

    waiter = asyncio.create_task(client.wait("del", progress=progress, timeout=60))
    await listed.wait()
    await akube.delete(SWEROLLOUTS, "del-0-0", namespace)
    await finish(akube, store, namespace, "del-0-1", trajectory=make_trajectory(1))
    final = await waiter
    assert final.total == 1 and final.done and totals[0] == 2

    await client.submit_batch([instance(0)], 1, batch="gone", inference=INFERENCE)
    listed.clear()
    waiter = asyncio.create_task(client.wait("gone", progress=progress, timeout=60))
    await listed.wait()
    await akube.delete(SWEROLLOUTS, "gone-0-0", namespace)
    with pytest.raises(UnknownBatch, match="deleted"):
        await waiter
