"""The adapters' shared client: one per settings and event loop, never one bound to a dead loop."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

from swerollout.client import AsyncRolloutClient
from swerollout.trainers import _settings
from swerollout.trainers._settings import AdapterSettings, shared_client

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
"""


def test_one_client_per_loop_and_settings_and_none_kept_for_a_closed_loop(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    first = AdapterSettings(
        endpoints=["http://127.0.0.1:1"], tokenizer="qwen-2.5", kubeconfig=str(kubeconfig), batch_prefix="a"
    )
    other = AdapterSettings(
        endpoints=["http://127.0.0.1:1"], tokenizer="qwen-2.5", kubeconfig=str(kubeconfig), batch_prefix="b"
    )

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def clients() -> tuple[AsyncRolloutClient, AsyncRolloutClient, AsyncRolloutClient]:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        return shared_client(first), shared_client(first), shared_client(other)

    a1, a2, b = asyncio.run(clients())
    assert a1 is a2 and a1 is not b
    gc.collect()
    # asyncio.run closed its loop: nothing of it is kept (other tests' live loops may be),
    # so a later loop, which may get the same id, builds its own client.
    assert loops[0]() is None
    assert not any(a1 in kept.values() or b in kept.values() for kept in _settings._CLIENTS.values())
    (c1, _, _) = asyncio.run(clients())
    assert c1 is not a1
