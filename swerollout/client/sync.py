"""A blocking facade over :class:`AsyncRolloutClient` for trainers that are not asyncio.

The async client lives on its own event loop in a portal thread (`swerollout.portal`);
every call hands one coroutine to that thread and waits for the result. So the blocking
client also works where an event loop is already running in the caller's thread: a
Jupyter cell, or sync code called by an async rollout worker. Such a call blocks that
loop while it waits, as any blocking call does; await AsyncRolloutClient there to keep
the loop free. Progress callbacks of ``wait`` run in the portal thread.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from swerollout.client.aclient import AsyncRolloutClient
from swerollout.portal import Blocking, Portal, blocking, blocking_stream


async def _aclose(client: AsyncRolloutClient) -> None:
    await client.aclose()


class RolloutClient(Blocking[AsyncRolloutClient]):
    """Same operations as :class:`AsyncRolloutClient`, blocking; each is the async method
    made blocking by one line. Safe to share between threads: their ``result`` calls share
    the one watch of the client."""

    def __init__(self, portal: Portal[AsyncRolloutClient]) -> None:
        self._portal = portal

    @classmethod
    def _start(cls, build: Callable[[], Awaitable[AsyncRolloutClient]]) -> RolloutClient:
        return cls(Portal(build, _aclose))

    @classmethod
    def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        namespace: str | None = None,
        **options: Any,
    ) -> RolloutClient:
        """Build from ``kubeconfig``, else $KUBECONFIG, else ~/.kube/config, else the pod's identity."""
        return cls._start(lambda: _connect(kubeconfig, context, namespace, options))

    @classmethod
    def in_cluster(
        cls, token_dir: str | os.PathLike[str] | None = None, *, namespace: str | None = None, **options: Any
    ) -> RolloutClient:
        """Build from the pod's ServiceAccount (see AsyncRolloutClient.in_cluster)."""
        return cls._start(lambda: _in_cluster(token_dir, namespace, options))

    @property
    def namespace(self) -> str:
        return self._portal.inner.namespace

    @property
    def aio(self) -> AsyncRolloutClient:
        return self._portal.inner

    submit_batch = blocking(AsyncRolloutClient.submit_batch)
    prepare = blocking(AsyncRolloutClient.prepare)
    wait_prepared = blocking(AsyncRolloutClient.wait_prepared)
    submit_one = blocking(AsyncRolloutClient.submit_one)
    wait = blocking(AsyncRolloutClient.wait)
    result = blocking(AsyncRolloutClient.result)
    abort = blocking(AsyncRolloutClient.abort)
    resume = blocking(AsyncRolloutClient.resume)
    delete = blocking(AsyncRolloutClient.delete)
    delete_batch = blocking(AsyncRolloutClient.delete_batch)
    results = blocking(AsyncRolloutClient.results)
    record = blocking(AsyncRolloutClient.record)
    stream_results = blocking_stream(AsyncRolloutClient.stream_results)
    list_rollouts = blocking(AsyncRolloutClient.list_rollouts)
    get_rollout = blocking(AsyncRolloutClient.get_rollout)
    members = blocking(AsyncRolloutClient.members)
    batch_specs = blocking(AsyncRolloutClient.batch_specs)
    batch_spec = blocking(AsyncRolloutClient.batch_spec)
    wait_rollout = blocking(AsyncRolloutClient.wait_rollout)
    fetch_trajectory = blocking(AsyncRolloutClient.fetch_trajectory)
    fetch_report = blocking(AsyncRolloutClient.fetch_report)
    check_cluster = blocking(AsyncRolloutClient.check_cluster)


async def _connect(
    kubeconfig: str | os.PathLike[str] | None, context: str | None, namespace: str | None, options: dict[str, Any]
) -> AsyncRolloutClient:
    return AsyncRolloutClient.connect(kubeconfig, context=context, namespace=namespace, **options)


async def _in_cluster(
    token_dir: str | os.PathLike[str] | None, namespace: str | None, options: dict[str, Any]
) -> AsyncRolloutClient:
    return AsyncRolloutClient.in_cluster(token_dir, namespace=namespace, **options)
