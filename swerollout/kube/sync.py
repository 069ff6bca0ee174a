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

from swerollout.kube.client import AsyncKubeClient
from swerollout.kube.config import ConfiguredClient, KubeConfig
from swerollout.portal import Blocking, Portal, blocking, blocking_stream


async def _aclose(client: AsyncKubeClient) -> None:
    await client.aclose()


class KubeClient(ConfiguredClient, Blocking[AsyncKubeClient]):
    """Blocking client; the operations of :class:`AsyncKubeClient`. Use as a context
    manager or call :meth:`close`. Safe to share between threads."""

    def __init__(self, config: KubeConfig, *, timeout: float = 30.0) -> None:
        async def build() -> AsyncKubeClient:
            return AsyncKubeClient(config, timeout=timeout)

        super().__init__(config, timeout=timeout)
        self._portal = Portal(build, _aclose)

    request = blocking(AsyncKubeClient.request)
    get = blocking(AsyncKubeClient.get)
    list = blocking(AsyncKubeClient.list)
    iter_items = blocking_stream(AsyncKubeClient.iter_items)
    create = blocking(AsyncKubeClient.create)
    replace = blocking(AsyncKubeClient.replace)
    patch = blocking(AsyncKubeClient.patch)
    apply = blocking(AsyncKubeClient.apply)
    delete = blocking(AsyncKubeClient.delete)
    delete_collection = blocking(AsyncKubeClient.delete_collection)
    watch = blocking_stream(AsyncKubeClient.watch)
    get_status = blocking(AsyncKubeClient.get_status)
    patch_status = blocking(AsyncKubeClient.patch_status)
    replace_status = blocking(AsyncKubeClient.replace_status)
    bind_pod = blocking(AsyncKubeClient.bind_pod)
    request_token = blocking(AsyncKubeClient.request_token)
    token_review = blocking(AsyncKubeClient.token_review)
    subject_access_review = blocking(AsyncKubeClient.subject_access_review)
