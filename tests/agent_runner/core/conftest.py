"""Fixtures of the runner-core tests (runner_core_fakes holds the fault-injecting server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from tests.support.runner_core_fakes import ORACLE_INSTANCE, Behaviour, FakeSGLang


@pytest.fixture
async def fake_sglang() -> AsyncIterator[FakeSGLang]:
    fake = FakeSGLang()
    hanging: dict[str, asyncio.Event] = {}

    async def generate(request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        fake.requests.append(payload)
        behaviour = fake.script.pop(0) if fake.script else Behaviour()
        if behaviour.kind == "drop":
            assert request.transport is not None
            request.transport.abort()  # the client sees the connection die mid-request
            await asyncio.sleep(0.05)
            return web.Response(status=500)
        if behaviour.kind == "hang":
            hanging[payload["rid"]] = asyncio.Event()
            try:
                await asyncio.wait_for(hanging[payload["rid"]].wait(), 30)
            except TimeoutError:
                pass
            else:
                return web.json_response(fake.answer(payload, [], "abort"))
        if behaviour.kind == "status":
            return web.Response(status=behaviour.status, headers=behaviour.headers, text=str(behaviour.body or "error"))
        output = behaviour.output_ids if behaviour.output_ids is not None else fake.default_output
        finish = "abort" if behaviour.kind == "abort" else "stop"
        return web.json_response(behaviour.body if behaviour.body is not None else fake.answer(payload, output, finish))

    async def abort_request(request: web.Request) -> web.Response:
        rid = (await request.json())["rid"]
        fake.aborted.append(rid)
        # SGLang's HTTP layer: only the exact rid of a live request is aborted.
        if rid in hanging:
            hanging[rid].set()
        return web.Response(status=200)

    async def server_info(request: web.Request) -> web.Response:
        if fake.server_info is None:
            return web.Response(status=404)
        return web.json_response(fake.server_info)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_post("/abort_request", abort_request)
    app.router.add_get("/health", health)
    app.router.add_get("/get_server_info", server_info)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


@pytest.fixture
def free_port_url() -> str:
    """A URL where nothing listens (the port was free a moment ago)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def oracle_server(tmp_path: Any) -> Iterator[Callable[..., Any]]:
    """Start the real SGLang-compatible policy server (oracle policy; qwen-2.5 unless told) in-process."""
    from swerollout_dev.policy_server import launch

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(ORACLE_INSTANCE) + "\n", encoding="utf-8")
    started: list[Any] = []

    def start(**settings: Any) -> Any:
        settings.setdefault("tokenizer", "qwen-2.5")
        handle = launch("oracle", tasks=tasks, **settings)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()
