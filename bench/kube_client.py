"""The async Kubernetes client under a burst of writes: which transport the operator uses.

    python -m bench.kube_client [--requests 1500]

A real kube-apiserver; a burst of ConfigMap creates and patches all started at once
(like an operator's queue after a batch arrives), through three clients:
HTTP/1.1 with every request handed to httpx's pool (the old way), HTTP/1.1 behind
our in-flight semaphore (the default), and HTTP/2 (one multiplexed TLS connection).
Printed: wall time and the client process's CPU per request, as ratios to the first.
The API server runs in other processes, so CPU here is the client's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from swerollout.kube import CONFIGMAPS, NAMESPACES, AsyncKubeClient, load_kubeconfig
from swerollout_dev.controlplane import ControlPlane

VARIANTS: dict[str, dict[str, Any]] = {
    "http1, httpx pool queues": {"max_in_flight": 100_000},
    "http1, semaphore 64": {},
    "http2, semaphore 64": {"http2": True},
}


async def _burst(kube: AsyncKubeClient, ns: str, n: int) -> dict[str, float]:
    async def one(i: int) -> None:
        name = f"c{i:05d}"
        await kube.create(
            CONFIGMAPS,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v" * 200}},
            ns,
        )
        await kube.patch(CONFIGMAPS, name, {"data": {"phase": "Running"}}, ns)

    cpu0, t0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    return {"wall_s": wall, "cpu_ms_per_request": cpu * 1000 / (2 * n), "requests_per_second": 2 * n / wall}


async def _main(n: int) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(Path(tmp) / "cp")
        plane.start()
        try:
            config = load_kubeconfig(plane.kubeconfig_path)
            async with AsyncKubeClient(config, timeout=300) as kube:  # the API server's first requests are slow
                await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "warm"}})
                await _burst(kube, "warm", 200)
            for i, (title, options) in enumerate(VARIANTS.items()):
                async with AsyncKubeClient(config, timeout=300, **options) as kube:
                    ns = f"kc{i}"
                    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                    out[title] = await _burst(kube, ns, n)
        finally:
            plane.stop(delete_data=True)
    return {"requests": 2 * n, "variants": out, "load_average": {"start": load_start, "end": os.getloadavg()[0]}}


def run(requests: int = 1500) -> dict[str, Any]:
    return asyncio.run(_main(requests // 2))


def report(result: dict[str, Any]) -> str:
    variants = result["variants"]
    base = next(iter(variants.values()))
    load = result["load_average"]
    lines = [
        f"kube client: {result['requests']} writes started at once against a real API server "
        f"(load average {load['start']:.1f} -> {load['end']:.1f}, {os.cpu_count()} cores)"
    ]
    for title, v in variants.items():
        lines.append(
            f"  {title:26s} {v['requests_per_second']:6.0f} req/s ({base['wall_s'] / v['wall_s']:.2f}x), "
            f"client CPU {v['cpu_ms_per_request']:.2f} ms/request "
            f"({v['cpu_ms_per_request'] / base['cpu_ms_per_request']:.2f}x)"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.requests)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
