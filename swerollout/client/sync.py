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
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from swerollout.api.v1alpha1 import Agent, Inference, Mode, Reward, SandboxSpec, SWERolloutBatchSpec
from swerollout.client.aclient import AsyncRolloutClient, InstanceLike, Object, ProgressCallback, TrainerLabel
from swerollout.client.progress import BatchProgress
from swerollout.client.records import RolloutRecord
from swerollout.portal import Portal

T = TypeVar("T")


async def _aclose(client: AsyncRolloutClient) -> None:
    await client.aclose()


class RolloutClient:
    """Same operations as :class:`AsyncRolloutClient`, blocking."""

    def __init__(self, portal: Portal[AsyncRolloutClient]) -> None:
        self._portal = portal
        self._inner = portal.inner

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
        return self._inner.namespace

    @property
    def aio(self) -> AsyncRolloutClient:
        return self._inner

    def _run(self, coro: Awaitable[T]) -> T:
        return self._portal.run(coro, what="RolloutClient")

    def close(self) -> None:
        self._portal.close()

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
        max_sampled_tokens: int | None = None,
        reward: Reward | Mapping[str, Any] | None = None,
        sandbox: SandboxSpec | Mapping[str, Any] | None = None,
        check_endpoint: bool = False,
        member_inference: Sequence[Inference | Mapping[str, Any]] | None = None,
        trainer_labels: Sequence[Mapping[str, TrainerLabel]] | None = None,
        prepared: bool = False,
    ) -> list[str]:
        return self._run(
            self._inner.submit_batch(
                instances,
                group_size,
                batch=batch,
                inference=inference,
                agent=agent,
                mode=mode,
                labels=labels,
                weight_version=weight_version,
                max_sampled_tokens=max_sampled_tokens,
                reward=reward,
                sandbox=sandbox,
                check_endpoint=check_endpoint,
                member_inference=member_inference,
                trainer_labels=trainer_labels,
                prepared=prepared,
            )
        )

    def prepare(self, batch: str) -> None:
        self._run(self._inner.prepare(batch))

    def wait_prepared(self, batch: str, *, timeout: float | None = None) -> list[str]:
        return self._run(self._inner.wait_prepared(batch, timeout=timeout))

    def submit_one(
        self,
        instance: InstanceLike,
        *,
        batch: str,
        sample: int,
        member: int = 0,
        inference: Inference | Mapping[str, Any],
        agent: Agent | Mapping[str, Any] | None = None,
        mode: Mode | str = Mode.TRAIN,
        labels: Mapping[str, str] | None = None,
        trainer_labels: Mapping[str, TrainerLabel] | None = None,
        weight_version: str | None = None,
        max_sampled_tokens: int | None = None,
        reward: Reward | Mapping[str, Any] | None = None,
        sandbox: SandboxSpec | Mapping[str, Any] | None = None,
        check_endpoint: bool = False,
    ) -> str:
        return self._run(
            self._inner.submit_one(
                instance,
                batch=batch,
                sample=sample,
                member=member,
                inference=inference,
                agent=agent,
                mode=mode,
                labels=labels,
                trainer_labels=trainer_labels,
                weight_version=weight_version,
                max_sampled_tokens=max_sampled_tokens,
                reward=reward,
                sandbox=sandbox,
                check_endpoint=check_endpoint,
            )
        )

    def wait(
        self, batch: str, *, progress: ProgressCallback | None = None, timeout: float | None = None
    ) -> BatchProgress:
        return self._run(self._inner.wait(batch, progress=progress, timeout=timeout))

    def result(self, name: str, *, timeout: float | None = None, report: bool = False) -> RolloutRecord:
        """Block until rollout ``name`` finishes (one shared watch serves every call, also
        from many threads at once)."""
        return self._run(self._inner.result(name, timeout=timeout, report=report))

    def abort(
        self,
        batch: str | None = None,
        *,
        names: Iterable[str] | None = None,
        inference: bool | None = None,
        admin_key: str | None = None,
    ) -> list[str]:
        return self._run(self._inner.abort(batch, names=names, inference=inference, admin_key=admin_key))

    def resume(
        self, batch: str | None = None, *, names: Iterable[str] | None = None, weight_version: str | None = None
    ) -> list[str]:
        return self._run(self._inner.resume(batch, names=names, weight_version=weight_version))

    def delete(self, names: Iterable[str]) -> list[str]:
        return self._run(self._inner.delete(names))

    def delete_batch(self, batch: str) -> list[str]:
        return self._run(self._inner.delete_batch(batch))

    def results(self, batch: str, *, reports: bool = False) -> list[RolloutRecord]:
        return self._run(self._inner.results(batch, reports=reports))

    def record(self, obj: Object, *, report: bool = False) -> RolloutRecord:
        return self._run(self._inner.record(obj, report=report))

    def stream_results(self, batch: str) -> Iterator[RolloutRecord]:
        return self._portal.iterate(self._inner.stream_results(batch), what="RolloutClient")

    def list_rollouts(self, batch: str | None = None) -> list[Object]:
        return self._run(self._inner.list_rollouts(batch))

    def get_rollout(self, name: str) -> Object:
        return self._run(self._inner.get_rollout(name))

    def members(self, batch: str) -> list[Object]:
        return self._run(self._inner.members(batch))

    def batch_specs(self) -> dict[str, SWERolloutBatchSpec]:
        return self._run(self._inner.batch_specs())

    def batch_spec(self, batch: str) -> SWERolloutBatchSpec | None:
        return self._run(self._inner.batch_spec(batch))


async def _connect(
    kubeconfig: str | os.PathLike[str] | None, context: str | None, namespace: str | None, options: dict[str, Any]
) -> AsyncRolloutClient:
    return AsyncRolloutClient.connect(kubeconfig, context=context, namespace=namespace, **options)


async def _in_cluster(
    token_dir: str | os.PathLike[str] | None, namespace: str | None, options: dict[str, Any]
) -> AsyncRolloutClient:
    return AsyncRolloutClient.in_cluster(token_dir, namespace=namespace, **options)
