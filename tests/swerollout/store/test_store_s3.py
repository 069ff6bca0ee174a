"""S3-only behaviour: missing bucket, unreachable or hanging server, multipart uploads."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swerollout.store import (
    NotFoundError,
    Owner,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    StoreUsage,
    open_store,
)
from swerollout.store.s3 import MIN_PART_SIZE
from tests.support.store_support import BUCKET, MotoServer

ROLLOUT = Owner(namespace="team-s3", uid="9f2a1c3e-0000-4000-8000-000000000001")


async def test_a_missing_bucket_is_a_config_error_naming_it(moto: MotoServer) -> None:
    store = open_store("s3://no-such-bucket/results", **moto.options())
    try:
        with pytest.raises(StoreConfigError, match="bucket 'no-such-bucket' does not exist") as caught:
            await store.check()
        assert not caught.value.retryable
        with pytest.raises(StoreConfigError, match="bucket 'no-such-bucket' does not exist"):
            await store.put(ROLLOUT, "report", b"x")
    finally:
        await store.aclose()


async def test_large_objects_use_multipart_and_carry_the_sha256(moto: MotoServer) -> None:
    store = open_store(f"s3://{BUCKET}/multipart", **moto.options())
    client = moto.client()
    try:
        data = os.urandom(2 * MIN_PART_SIZE + 17)
        stored = await store.put(ROLLOUT, "snapshot", data)
        head = client.head_object(Bucket=BUCKET, Key=stored.ref.removeprefix(f"s3://{BUCKET}/"))
        # A multipart ETag is "<md5 of part md5s>-<part count>".
        assert head["ETag"].strip('"').endswith("-3")
        assert head["Metadata"]["sha256"] == hashlib.sha256(data).hexdigest()
        assert await store.get(stored.ref) == data
        assert client.list_multipart_uploads(Bucket=BUCKET, Prefix="multipart/").get("Uploads", []) == []
        assert await store.delete_owner(ROLLOUT) == 1
    finally:
        client.close()
        await store.aclose()


async def test_delete_owner_aborts_unfinished_uploads(moto: MotoServer) -> None:
    store = open_store(f"s3://{BUCKET}/aborts", **moto.options())
    client = moto.client()
    other = Owner(namespace="team-s3", uid="someone-else")
    try:
        # An upload the operator crashed in the middle of: its parts cost storage.
        for owner in (ROLLOUT, other):
            client.create_multipart_upload(Bucket=BUCKET, Key=f"aborts/{owner.prefix}snapshot/{'0' * 64}")
        await store.delete_owner(ROLLOUT)
        left = client.list_multipart_uploads(Bucket=BUCKET, Prefix="aborts/").get("Uploads", [])
        assert [u["Key"] for u in left] == [f"aborts/{other.prefix}snapshot/{'0' * 64}"]
        await store.delete_owner(other)
    finally:
        client.close()
        await store.aclose()


async def test_foreign_keys_under_the_prefix_are_not_served_or_counted(moto: MotoServer) -> None:
    store = open_store(f"s3://{BUCKET}/foreign", **moto.options())
    client = moto.client()
    try:
        client.put_object(Bucket=BUCKET, Key=f"foreign/{ROLLOUT.prefix}trajectory/not-a-hash", Body=b"x")
        client.put_object(Bucket=BUCKET, Key="foreign/README", Body=b"x")
        assert await store.usage() == StoreUsage(objects=0, bytes=0)
        # ... but the rollout's prefix is wholly its own, so deleting it removes them.
        assert await store.delete_owner(ROLLOUT) == 1
    finally:
        client.close()
        await store.aclose()


@pytest.mark.timeout(120)  # includes starting a second moto server on a loaded machine
async def test_a_stopped_server_is_unavailable_not_a_hang(moto_factory: object) -> None:
    server: MotoServer = moto_factory()  # type: ignore[operator]
    client = server.client()
    client.create_bucket(Bucket="doomed")
    client.close()
    store = open_store("s3://doomed", **server.options(connect_timeout=1.0, read_timeout=2.0, max_attempts=1))
    try:
        stored = await store.put(ROLLOUT, "trajectory", b"before the outage")
        server.stop()

        for call in (
            store.get(stored.ref),
            store.put(ROLLOUT, "trajectory", b"during the outage"),
            store.exists(stored.ref),
            store.delete_owner(ROLLOUT),
            store.usage(),
            store.check(),
        ):
            with pytest.raises(StoreUnavailable, match="cannot reach S3") as caught:
                await call
            assert caught.value.retryable
    finally:
        await store.aclose()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never answers (a hung S3 endpoint)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn)
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


@pytest.mark.timeout(60)
async def test_a_server_that_never_answers_times_out_as_unavailable(silent_server: int) -> None:
    store = open_store(
        "s3://bucket/prefix",
        endpoint_url=f"http://127.0.0.1:{silent_server}",
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        addressing_style="path",
        connect_timeout=1.0,
        read_timeout=0.5,
        max_attempts=1,
    )
    try:
        with pytest.raises(StoreUnavailable):
            await store.put(ROLLOUT, "report", b"x")
        with pytest.raises(StoreUnavailable):
            await store.get(f"s3://bucket/prefix/{ROLLOUT.prefix}report/{'a' * 64}")
    finally:
        await store.aclose()


def test_options_are_validated_at_open() -> None:
    with pytest.raises(StoreConfigError, match="both access_key_id and secret_access_key"):
        open_store("s3://bucket", access_key_id="only-half")
    with pytest.raises(StoreConfigError, match="multipart_chunksize"):
        open_store("s3://bucket", multipart_chunksize=1024)
    with pytest.raises(StoreConfigError, match="must look like s3://bucket"):
        open_store("s3:///prefix-without-bucket")
    with pytest.raises(StoreConfigError, match="invalid S3 key prefix"):
        open_store("s3://bucket/a/../b")


async def test_the_secret_never_shows_in_the_store_or_its_options(moto: MotoServer) -> None:
    store = open_store(f"s3://{BUCKET}/secrets", **moto.options(secret_access_key="s3cr3t-value"))
    try:
        assert "s3cr3t-value" not in repr(store)
        assert "s3cr3t-value" not in store.url
        assert "s3cr3t-value" not in repr(store._options)  # type: ignore[attr-defined]
    finally:
        await store.aclose()


async def test_errors_are_store_errors_not_boto_errors(moto: MotoServer) -> None:
    store = open_store(f"s3://{BUCKET}/mapped", **moto.options())
    try:
        with pytest.raises(NotFoundError) as caught:
            await store.get(f"s3://{BUCKET}/mapped/{ROLLOUT.prefix}report/{'b' * 64}")
        assert isinstance(caught.value, StoreError)
        assert "botocore" not in type(caught.value).__module__
    finally:
        await store.aclose()


async def test_checksum_headers_can_be_turned_off_for_strict_servers(moto: MotoServer) -> None:
    store = open_store(f"s3://{BUCKET}/no-checksums", **moto.options(send_checksums=False))
    try:
        small, large = b"small", os.urandom(MIN_PART_SIZE + 1)
        for data in (small, large):
            stored = await store.put(ROLLOUT, "other", data)
            assert await store.get(stored.ref) == data
        assert await store.delete_owner(ROLLOUT) == 2
    finally:
        await store.aclose()


class _ErrorServer:
    """An HTTP server that answers every request with one S3 error document."""

    def __init__(self) -> None:
        self.status = 500
        self.code = "InternalError"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>'
                    f"<Error><Code>{owner.code}</Code><Message>canned {owner.code}</Message>"
                    "<RequestId>r</RequestId></Error>"
                ).encode()
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def error_server() -> Iterator[_ErrorServer]:
    server = _ErrorServer()
    yield server
    server.close()


@pytest.mark.parametrize(
    ("status", "code", "error", "retryable", "message"),
    [
        (403, "AccessDenied", StoreConfigError, False, "access denied .*check the credentials"),
        (403, "InvalidAccessKeyId", StoreConfigError, False, "access denied"),
        (404, "NoSuchBucket", StoreConfigError, False, "bucket 'bucket' does not exist"),
        (404, "NoSuchKey", NotFoundError, False, "does not exist in the store"),
        (503, "SlowDown", StoreUnavailable, True, "failed transiently"),
        (500, "InternalError", StoreUnavailable, True, "failed transiently"),
        (400, "BadDigest", StoreUnavailable, True, "failed transiently"),
        (400, "InvalidArgument", StoreError, False, "refused the request .*InvalidArgument"),
    ],
)
async def test_s3_errors_map_to_store_errors(
    error_server: _ErrorServer, status: int, code: str, error: type[StoreError], retryable: bool, message: str
) -> None:
    error_server.status, error_server.code = status, code
    store = open_store(
        "s3://bucket/prefix",
        endpoint_url=error_server.endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        addressing_style="path",
        max_attempts=1,
        connect_timeout=2.0,
        read_timeout=5.0,
    )
    try:
        with pytest.raises(error, match=message) as caught:
            await store.get(f"s3://bucket/prefix/{ROLLOUT.prefix}report/{'c' * 64}")
        assert type(caught.value) is error
        assert caught.value.retryable is retryable
    finally:
        await store.aclose()
