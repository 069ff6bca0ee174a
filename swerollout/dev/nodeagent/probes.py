"""Readiness probes: exec, httpGet and tcpSocket, as the kubelet runs them.

Network probes go to the pod's IP (its own loopback address on this node)
unless the probe names a host, as the kubelet probes the pod IP.
"""

from __future__ import annotations

import asyncio
import subprocess

import httpx

from .podspec import Container, Probe


async def probe_once(
    probe: Probe, container: Container, *, env: dict[str, str], cwd: str, exec_prefix: list[str], pod_ip: str
) -> bool:
    timeout = max(probe.timeout_seconds, 0.1)
    try:
        if probe.exec is not None:
            proc = await asyncio.create_subprocess_exec(
                *exec_prefix, *probe.exec.command, env=env, cwd=cwd,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            )
            try:
                return await asyncio.wait_for(proc.wait(), timeout) == 0
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                return False
        if probe.http_get is not None:
            g = probe.http_get
            url = f"{g.scheme.lower()}://{g.host or pod_ip}:{container.named_port(g.port)}{g.path}"
            async with httpx.AsyncClient(verify=False, timeout=timeout) as client:
                resp = await client.get(url)
            return 200 <= resp.status_code < 400
        if probe.tcp_socket is not None:
            t = probe.tcp_socket
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(t.host or pod_ip, container.named_port(t.port)),
                timeout,
            )
            writer.close()
            return True
    except (OSError, httpx.HTTPError, asyncio.TimeoutError, ValueError):
        return False
    return True
