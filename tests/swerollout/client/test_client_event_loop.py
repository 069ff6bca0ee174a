"""The blocking RolloutClient where an event loop already runs in the caller's thread: a
Jupyter cell (ipykernel runs cells inside its asyncio loop) and sync code called by an async
rollout worker. The calls go to the client's portal thread; errors keep their types."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from swerollout.client import AsyncRolloutClient, RolloutClient, UnknownBatch
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.tasks import DEFAULT_TASKS_DIR, load_instances

INFERENCE = {"endpoint": "http://127.0.0.1:9", "tokenizer": "qwen-2.5"}


async def test_jupyter_style_cell_in_a_running_loop(crd: ControlPlane, namespace: str) -> None:
    # This coroutine is the cell: asyncio.get_running_loop() succeeds here, as in ipykernel.
    loop = asyncio.get_running_loop()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    background = asyncio.create_task(ticker())
    instances = load_instances(DEFAULT_TASKS_DIR / "instances.jsonl")[:2]
    client = RolloutClient.connect(crd.kubeconfig_path, namespace=namespace)
    try:
        names = client.submit_batch(instances, 2, batch="nb", inference=INFERENCE)
        assert names == ["nb-0-0", "nb-0-1", "nb-1-0", "nb-1-1"]
        assert [o["metadata"]["name"] for o in client.members("nb")] == names
        assert sorted(client.abort("nb")) == names
        assert client.abort("nb") == [], "the batch reads suspended: nothing left to abort"
        with pytest.raises(UnknownBatch, match="no-such"):
            client.members("no-such")
    finally:
        client.close()
    assert asyncio.get_running_loop() is loop
    # The cell's loop was blocked during the calls, not broken: it still runs its tasks.
    before = ticks
    await asyncio.sleep(0.2)
    assert ticks > before
    background.cancel()
    with pytest.raises(RuntimeError, match="closed"):
        client.members("nb")


def _sync_step(client: RolloutClient, batch: str) -> list[str]:
    """What a trainer's sync helper does; it does not know it is called from async code."""
    client.submit_batch(load_instances(DEFAULT_TASKS_DIR / "instances.jsonl")[:1], 2, batch=batch, inference=INFERENCE)
    return [o["metadata"]["name"] for o in client.members(batch)]


async def test_sync_code_called_by_an_async_worker(crd: ControlPlane, namespace: str) -> None:
    with RolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as client:
        # Called directly in the worker's loop thread, and from a worker thread of that loop:
        # one client serves both, its calls all run on the portal thread.
        direct = _sync_step(client, "worker-a")
        threaded = await asyncio.to_thread(_sync_step, client, "worker-b")
        assert direct == ["worker-a-0-0", "worker-a-0-1"]
        assert threaded == ["worker-b-0-0", "worker-b-0-1"]
        both = await asyncio.gather(
            asyncio.to_thread(client.members, "worker-a"), asyncio.to_thread(client.members, "worker-b")
        )
        assert [len(m) for m in both] == [2, 2]


def test_plain_sync_use_still_works_and_the_portal_thread_ends(crd: ControlPlane, namespace: str) -> None:
    before = set(threading.enumerate())
    with RolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as client:
        assert _sync_step(client, "plain") == ["plain-0-0", "plain-0-1"]
        assert set(threading.enumerate()) - before  # the portal thread
    assert not {t for t in set(threading.enumerate()) - before if t.is_alive()}


def test_every_async_operation_has_its_blocking_twin() -> None:
    """A trainer that is not asyncio gets every operation (aclose is close, the portal's)."""
    operations = {
        name
        for name, fn in inspect.getmembers(AsyncRolloutClient)
        if not name.startswith("_") and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
    }
    missing = sorted(name for name in operations - {"aclose"} if not hasattr(RolloutClient, name))
    assert not missing, f"RolloutClient lacks {missing}: add `name = blocking(AsyncRolloutClient.name)`"
    assert hasattr(RolloutClient, "close")
