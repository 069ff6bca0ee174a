"""A blocking facade over :class:`AsyncRolloutClient` for trainers that are not asyncio.

It owns a private event loop; every call runs one coroutine to completion on it.
Do not call it from inside a running event loop (use the async client there).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from swerollout.api.v1alpha1 import Agent, Inference, Mode, Reward, SandboxSpec
from swerollout.client.aclient import AsyncRolloutClient, InstanceLike, Object, ProgressCallback
from swerollout.client.errors import ClientConfigError
from swerollout.client.progress import BatchProgress
from swerollout.client.records import RolloutRecord

T = TypeVar("T")


def _refuse_inside_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ClientConfigError(
        "RolloutClient is the blocking client and cannot run inside a running event loop (asyncio code, "
        "Jupyter): use AsyncRolloutClient and await its methods there"
    )


class RolloutClient:
    """Same operations as :class:`AsyncRolloutClient`, blocking."""

    def __init__(self, inner: AsyncRolloutClient, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop

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
        _refuse_inside_event_loop()
        loop = asyncio.new_event_loop()
        try:
            # The HTTP clients bind to the loop they are created in.
            inner = loop.run_until_complete(_connect(kubeconfig, context, namespace, options))
        except BaseException:
            loop.close()
            raise
        return cls(inner, loop)

    @classmethod
    def in_cluster(
        cls, token_dir: str | os.PathLike[str] | None = None, *, namespace: str | None = None, **options: Any
    ) -> RolloutClient:
        """Build from the pod's ServiceAccount (see AsyncRolloutClient.in_cluster)."""
        _refuse_inside_event_loop()
        loop = asyncio.new_event_loop()
        try:
            inner = loop.run_until_complete(_in_cluster(token_dir, namespace, options))
        except BaseException:
            loop.close()
            raise
        return cls(inner, loop)

    @property
    def namespace(self) -> str:
        return self._inner.namespace

    @property
    def aio(self) -> AsyncRolloutClient:
        return self._inner

    def _run(self, coro: Awaitable[T]) -> T:
        _refuse_inside_event_loop()
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._inner.aclose())
        finally:
            self._loop.close()

    def __enter__(self) -> RolloutClient:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def submit_batch(
        self,
        instances: Iterable[InstanceLike],
        group_size: int,
        *,
        batch: str,
        inference: Inference | Mapping[str, Any],
        agent: Agent | Mapping[str, Any] | None = None,
        mode: Mode | str = Mode.TRAIN,
        labels: Mapping[str, str] | None = None,
        weight_version: str | None = None,
        reward: Reward | Mapping[str, Any] | None = None,
        sandbox: SandboxSpec | Mapping[str, Any] | None = None,
        check_endpoint: bool = False,
        member_inference: Sequence[Inference | Mapping[str, Any]] | None = None,
    ) -> list[str]:
        return self._run(
            self._inner.submit_batch(
                instances, group_size, batch=batch, inference=inference, agent=agent, mode=mode, labels=labels,
                weight_version=weight_version, reward=reward, sandbox=sandbox, check_endpoint=check_endpoint,
                member_inference=member_inference,
            )
        )

    def wait(
        self, batch: str, *, progress: ProgressCallback | None = None, timeout: float | None = None
    ) -> BatchProgress:
        return self._run(self._inner.wait(batch, progress=progress, timeout=timeout))

    def abort(self, batch: str) -> list[str]:
        return self._run(self._inner.abort(batch))

    def resume(self, batch: str) -> list[str]:
        return self._run(self._inner.resume(batch))

    def results(self, batch: str) -> list[RolloutRecord]:
        return self._run(self._inner.results(batch))

    def stream_results(self, batch: str) -> Iterator[RolloutRecord]:
        stream = self._inner.stream_results(batch)
        try:
            while True:
                try:
                    yield self._run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(stream.aclose())

    def list_rollouts(self, batch: str | None = None) -> list[Object]:
        return self._run(self._inner.list_rollouts(batch))

    def get_rollout(self, name: str) -> Object:
        return self._run(self._inner.get_rollout(name))

    def members(self, batch: str) -> list[Object]:
        return self._run(self._inner.members(batch))


async def _connect(
    kubeconfig: str | os.PathLike[str] | None, context: str | None, namespace: str | None, options: dict[str, Any]
) -> AsyncRolloutClient:
    return AsyncRolloutClient.connect(kubeconfig, context=context, namespace=namespace, **options)


async def _in_cluster(
    token_dir: str | os.PathLike[str] | None, namespace: str | None, options: dict[str, Any]
) -> AsyncRolloutClient:
    return AsyncRolloutClient.in_cluster(token_dir, namespace=namespace, **options)
