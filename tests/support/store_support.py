"""Helpers of the result-store tests: a moto S3 server process and raw access to stored bytes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import boto3
import httpx

from swerollout.store.s3 import MIN_PART_SIZE

BUCKET = "swerollout-results"
MOTO_BIN = Path(sys.executable).parent / "moto_server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class MotoServer:
    """A running ``moto_server`` process."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def options(self, **overrides: Any) -> dict[str, Any]:
        """Store options for this server: short timeouts and one attempt so that
        failures surface in a test's time, multipart from 5 MiB so it is exercised."""
        options: dict[str, Any] = {
            "endpoint_url": self.endpoint,
            "region": "us-east-1",
            "access_key_id": "testing",
            "secret_access_key": "testing",
            "addressing_style": "path",
            "connect_timeout": 2.0,
            "read_timeout": 10.0,
            "max_attempts": 2,
            "multipart_threshold": MIN_PART_SIZE,
            "multipart_chunksize": MIN_PART_SIZE,
        }
        options.update(overrides)
        return options

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_moto() -> MotoServer:
    port = free_port()
    process = subprocess.Popen(
        [str(MOTO_BIN), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = MotoServer(process, port)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode} before serving")
        try:
            # moto's own management API answers once the server is fully up.
            if httpx.get(f"{server.endpoint}/moto-api/", timeout=1.0).status_code < 500:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError("moto_server did not start serving within 60 s")
        time.sleep(0.1)


class RawAccess(Protocol):
    def read(self, ref: str) -> bytes: ...
    def write(self, ref: str, data: bytes) -> None: ...
    def keys(self) -> list[str]: ...


class FileRaw:
    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, ref: str) -> bytes:
        return Path(urlsplit(ref).path).read_bytes()

    def write(self, ref: str, data: bytes) -> None:
        Path(urlsplit(ref).path).write_bytes(data)

    def keys(self) -> list[str]:
        """Every file below the root (hidden ones too), relative, sorted."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())


class S3Raw:
    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def read(self, ref: str) -> bytes:
        parts = urlsplit(ref)
        body: bytes = self.client.get_object(Bucket=parts.netloc, Key=parts.path[1:])["Body"].read()
        return body

    def write(self, ref: str, data: bytes) -> None:
        parts = urlsplit(ref)
        self.client.put_object(Bucket=parts.netloc, Key=parts.path[1:], Body=data)

    def keys(self) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=self.prefix + "/")
        return sorted(item["Key"][len(self.prefix) + 1 :] for page in pages for item in page.get("Contents", []))
