"""Result-store throughput: put and get N objects of a given size, filesystem and/or S3.

    .venv/bin/python bench/store_throughput.py --backend both --size-kib 1024 --count 32 --concurrency 8

The S3 numbers come from a local moto server (started and stopped here), so they
measure the store's own overhead (hashing, threads, boto) more than S3 itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import httpx

from swerollout.store import Owner, ResultStore, open_store


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _run(store: ResultStore, size: int, count: int, concurrency: int) -> dict[str, float]:
    owner = Owner(namespace="bench", uid="throughput")
    blobs = [os.urandom(size) for _ in range(count)]
    limit = asyncio.Semaphore(concurrency)

    async def put(blob: bytes) -> str:
        async with limit:
            return (await store.put(owner, "trajectory", blob)).ref

    async def get(ref: str) -> bytes:
        async with limit:
            return await store.get(ref)

    start = time.perf_counter()
    refs = await asyncio.gather(*(put(b) for b in blobs))
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    await asyncio.gather(*(get(r) for r in refs))
    get_s = time.perf_counter() - start
    start = time.perf_counter()
    await asyncio.gather(*(put(b) for b in blobs))  # already stored: the idempotent path
    reput_s = time.perf_counter() - start
    await store.delete_owner(owner)
    mib = size * count / (1 << 20)
    return {
        "put MiB/s": mib / put_s,
        "get MiB/s": mib / get_s,
        "re-put MiB/s": mib / reput_s,
        "put objects/s": count / put_s,
    }


def _start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{endpoint}/moto-api/", timeout=1.0)
            return process, endpoint
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("moto_server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["file", "s3", "both"], default="both")
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--count", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--no-fsync", action="store_true", help="filesystem: skip fsync")
    args = parser.parse_args()
    size = args.size_kib * 1024
    results: dict[str, dict[str, float]] = {}

    if args.backend in ("file", "both"):
        with tempfile.TemporaryDirectory() as root:
            store = open_store(Path(root).as_uri(), fsync=not args.no_fsync)
            results["file"] = asyncio.run(_run(store, size, args.count, args.concurrency))
    if args.backend in ("s3", "both"):
        process, endpoint = _start_moto()
        try:
            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id="bench",
                aws_secret_access_key="bench",
            )
            client.create_bucket(Bucket="bench")
            client.close()
            creds: dict[str, Any] = {"region": "us-east-1", "access_key_id": "bench", "secret_access_key": "bench"}
            store = open_store("s3://bench/results", endpoint_url=endpoint, addressing_style="path", **creds)

            async def run_and_close() -> dict[str, float]:
                try:
                    return await _run(store, size, args.count, args.concurrency)
                finally:
                    await store.aclose()

            results["s3 (moto)"] = asyncio.run(run_and_close())
        finally:
            process.terminate()
            process.wait(timeout=10)

    print(f"{args.count} objects x {args.size_kib} KiB, concurrency {args.concurrency}")
    for backend, numbers in results.items():
        print(f"  {backend:10s} " + "  ".join(f"{name} {value:8.1f}" for name, value in numbers.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
