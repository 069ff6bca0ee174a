"""A loopback TCP proxy that can cut a connection in the middle of a request.

Used to prove that a dropped connection never makes a sandbox command run
twice: the proxy forwards the request to swerex-remote, waits, then closes the
client's socket before any answer gets back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress


class DroppingProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        drop_when: bytes,
        drop_after: float = 0.3,
        before_drop: Callable[[], Awaitable[None]] | None = None,
        close_upstream: bool = True,
    ) -> None:
        self.upstream_port = upstream_port
        self.drop_when = drop_when
        self.drop_after = drop_after
        self.before_drop = before_drop
        self.close_upstream = close_upstream
        self.drops = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def start(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(BaseException):
                await task

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        cut = asyncio.Event()

        async def client_to_upstream() -> None:
            while data := await client_reader.read(65536):
                upstream_writer.write(data)
                await upstream_writer.drain()
                if self.drops == 0 and self.drop_when in data:
                    self.drops += 1
                    cut.set()
                    await asyncio.sleep(self.drop_after)
                    if self.before_drop is not None:
                        await self.before_drop()
                    client_writer.transport.abort()
                    if self.close_upstream:
                        upstream_writer.transport.abort()
                    return
            upstream_writer.close()

        async def upstream_to_client() -> None:
            while data := await upstream_reader.read(65536):
                if cut.is_set():
                    return  # the client is gone; the answer is lost on purpose
                client_writer.write(data)
                await client_writer.drain()
            client_writer.close()

        tasks = [asyncio.create_task(client_to_upstream()), asyncio.create_task(upstream_to_client())]
        self._tasks.update(tasks)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._tasks.difference_update(tasks)
            client_writer.transport.abort()
            upstream_writer.transport.abort()
