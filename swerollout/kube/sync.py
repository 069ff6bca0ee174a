"""The blocking Kubernetes client: :class:`AsyncKubeClient` behind a portal.

There is one implementation of every request, retry and error mapping, the async one;
:class:`KubeClient` runs it on its own event loop thread (`swerollout.portal`) and waits.
Each method below is the async method of the same name, made blocking by one line, so
the two cannot drift: same arguments, same result, same :class:`KubeError`. A watch or
``iter_items`` is a plain iterator whose every step is one blocking step of the async
one; leaving it early closes the stream.

For the dev tooling, tests and benches, which are not asyncio; code that is should await
:class:`AsyncKubeClient` itself.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar

from swerollout.kube.client import AsyncKubeClient
from swerollout.kube.config import ConfiguredClient, KubeConfig
from swerollout.portal import Portal

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C", bound=Callable[..., object])


def _named(call: C, method: Callable[..., object]) -> C:
    # help() and inspect.signature show the async method's parameters and docstring.
    functools.update_wrapper(call, method)
    call.__qualname__ = f"KubeClient.{method.__name__}"
    return call


def _blocking(
    method: Callable[Concatenate[AsyncKubeClient, P], Awaitable[T]],
) -> Callable[Concatenate[KubeClient, P], T]:
    def call(self: KubeClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._portal.run(method(self._portal.inner, *args, **kwargs), what="KubeClient")

    return _named(call, method)


def _blocking_stream(
    method: Callable[Concatenate[AsyncKubeClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[KubeClient, P], Iterator[T]]:
    def call(self: KubeClient, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._portal.iterate(method(self._portal.inner, *args, **kwargs), what="KubeClient")

    return _named(call, method)


async def _aclose(client: AsyncKubeClient) -> None:
    await client.aclose()


class KubeClient(ConfiguredClient):
    """Blocking client; the operations of :class:`AsyncKubeClient`. Use as a context
    manager or call :meth:`close`. Safe to share between threads."""

    def __init__(self, config: KubeConfig, *, timeout: float = 30.0) -> None:
        async def build() -> AsyncKubeClient:
            return AsyncKubeClient(config, timeout=timeout)

        super().__init__(config, timeout=timeout)
        self._portal = Portal(build, _aclose)

    def close(self) -> None:
        self._portal.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    request = _blocking(AsyncKubeClient.request)
    get = _blocking(AsyncKubeClient.get)
    list = _blocking(AsyncKubeClient.list)
    iter_items = _blocking_stream(AsyncKubeClient.iter_items)
    create = _blocking(AsyncKubeClient.create)
    replace = _blocking(AsyncKubeClient.replace)
    patch = _blocking(AsyncKubeClient.patch)
    apply = _blocking(AsyncKubeClient.apply)
    delete = _blocking(AsyncKubeClient.delete)
    delete_collection = _blocking(AsyncKubeClient.delete_collection)
    watch = _blocking_stream(AsyncKubeClient.watch)
    get_status = _blocking(AsyncKubeClient.get_status)
    patch_status = _blocking(AsyncKubeClient.patch_status)
    replace_status = _blocking(AsyncKubeClient.replace_status)
    bind_pod = _blocking(AsyncKubeClient.bind_pod)
    request_token = _blocking(AsyncKubeClient.request_token)
    token_review = _blocking(AsyncKubeClient.token_review)
    subject_access_review = _blocking(AsyncKubeClient.subject_access_review)
