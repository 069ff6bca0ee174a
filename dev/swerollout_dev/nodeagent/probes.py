"""Readiness probes: exec, httpGet and tcpSocket, as the kubelet runs them.

Network probes go to the pod's IP (its own loopback address on this node)
unless the probe names a host, as the kubelet probes the pod IP. In a pod with
its own network namespaces they dial from inside the container's namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx

from .netns import setns
from .podspec import Container, Probe


@dataclass(frozen=True)
class ExecContext:
    """What a container's exec probes run in: its environment, working directory and the
    prefix that enters its view (bubblewrap, its network namespace).

    Written beside the container's process record when it starts, so that an agent that
    restarts and adopts the container probes it as the one that started it; without it an
    adopted container's probe ran on the host and failed for good (the pod never ready again).
    """

    env: dict[str, str]
    cwd: str
    prefix: list[str]

    def dump(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        # The environment may hold a Secret's values: readable by root only, as /proc's is.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"env": self.env, "cwd": self.cwd, "prefix": self.prefix}, out)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ExecContext | None:
        try:
            data = json.loads(path.read_text())
            return cls(dict(data["env"]), str(data["cwd"]), [str(a) for a in data["prefix"]])
        except (OSError, ValueError, KeyError, TypeError):
            return None


async def _socket_in(netns: Path) -> socket.socket:
    """A TCP socket of namespace ``netns``, made by a thread of its own (setns moves only
    the calling thread, and no pooled thread may stay in a pod's namespace)."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[socket.socket] = loop.create_future()

    def make() -> None:
        try:
            setns(netns)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            loop.call_soon_threadsafe(made.set_result, s)
        except OSError as exc:
            loop.call_soon_threadsafe(made.set_exception, exc)

    threading.Thread(target=make, daemon=True).start()
    return await made


async def _dial(
    host: str, port: int, netns: Path | None, *, tls: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if netns is None:
        return await asyncio.open_connection(host, port, ssl=context)
    sock = await _socket_in(netns)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock, ssl=context, server_hostname=host if tls else None)


async def _http_get_in(netns: Path, scheme: str, host: str, port: int, path: str) -> int:
    reader, writer = await _dial(host, port, netns, tls=scheme == "https")
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.30\r\n\r\n".encode())
        await writer.drain()
        status = (await reader.readline()).decode("latin-1").split()
        return int(status[1]) if len(status) >= 2 and status[1].isdigit() else 0
    finally:
        writer.close()


async def probe_once(
    probe: Probe,
    container: Container,
    *,
    env: dict[str, str],
    cwd: str,
    exec_prefix: list[str],
    pod_ip: str,
    netns: Path | None = None,
) -> bool:
    timeout = max(probe.timeout_seconds, 0.1)
    try:
        if probe.exec is not None:
            proc = await asyncio.create_subprocess_exec(
                *exec_prefix,
                *probe.exec.command,
                env=env,
                cwd=cwd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
            try:
                return await asyncio.wait_for(proc.wait(), timeout) == 0
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return False
        if probe.http_get is not None:
            g = probe.http_get
            host, port = g.host or pod_ip, container.named_port(g.port)
            if netns is not None:
                code = await asyncio.wait_for(_http_get_in(netns, g.scheme.lower(), host, port, g.path), timeout)
                return 200 <= code < 400
            url = f"{g.scheme.lower()}://{host}:{port}{g.path}"
            async with httpx.AsyncClient(verify=False, timeout=timeout) as client:
                resp = await client.get(url)
            return 200 <= resp.status_code < 400
        if probe.tcp_socket is not None:
            t = probe.tcp_socket
            _, writer = await asyncio.wait_for(_dial(t.host or pod_ip, container.named_port(t.port), netns), timeout)
            writer.close()
            return True
    except (TimeoutError, OSError, httpx.HTTPError, ValueError):
        return False
    return True
