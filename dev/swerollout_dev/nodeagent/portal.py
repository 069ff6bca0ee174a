"""A pod's portal: the only links between a pod's network namespaces and the host.

One process per pod (started, recorded and adopted like a container, so it
outlives a node agent restart). Each link listens at an address inside one
namespace and connects, for every accepted connection, to an address inside
another, copying bytes both ways. A socket belongs to the namespace of the thread
that created it, so each namespace has one thread that entered it and creates
sockets there; everything else runs on the event loop.

    python -m swerollout_dev.nodeagent.portal LINKS.json
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .netns import setns

log = logging.getLogger("swerollout_dev.nodeagent.portal")


class Link(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_netns: str | None  # path of a namespace; None: the portal's own (the host's)
    listen: tuple[str, int]
    connect_netns: str | None
    connect: tuple[str, int]


class Links(BaseModel):
    model_config = ConfigDict(extra="forbid")

    links: list[Link]


class _Namespaces:
    """One single-thread executor per namespace, its thread inside that namespace."""

    def __init__(self) -> None:
        self._pools: dict[str | None, concurrent.futures.ThreadPoolExecutor] = {}

    def _pool(self, netns: str | None) -> concurrent.futures.ThreadPoolExecutor:
        if netns not in self._pools:
            init = (lambda: setns(Path(netns))) if netns else None
            self._pools[netns] = concurrent.futures.ThreadPoolExecutor(1, initializer=init)
        return self._pools[netns]

    async def socket(self, netns: str | None, *, listen: tuple[str, int] | None = None) -> socket.socket:
        def make() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                if listen is not None:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(listen)
                    s.listen(128)
                s.setblocking(False)
            except BaseException:
                s.close()
                raise
            return s

        return await asyncio.get_running_loop().run_in_executor(self._pool(netns), make)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def serve(links: Links, ready_file: Path | None = None) -> None:
    spaces = _Namespaces()
    loop = asyncio.get_running_loop()
    servers = []
    for link in links.links:

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link = link) -> None:
            try:
                upstream = await spaces.socket(link.connect_netns)
                try:
                    await asyncio.wait_for(loop.sock_connect(upstream, link.connect), 30)
                except BaseException:
                    upstream.close()
                    raise
                up_reader, up_writer = await asyncio.open_connection(sock=upstream)
            except (TimeoutError, OSError):
                writer.close()  # the peer sees the connection closed, as if refused
                return
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                writer.close()
                up_writer.close()

        sock = await spaces.socket(link.listen_netns, listen=link.listen)
        servers.append(await asyncio.start_server(handle, sock=sock))
    if ready_file is not None:
        ready_file.touch()
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        raise SystemExit("usage: python -m swerollout_dev.nodeagent.portal LINKS.json")
    links = Links.model_validate_json(Path(args[0]).read_text())
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(links, Path(args[0]).with_suffix(".ready")))


if __name__ == "__main__":
    main()
