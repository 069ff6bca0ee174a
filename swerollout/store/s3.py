"""Result store on S3 or any S3-compatible server (MinIO, Ceph RGW, moto, ...).

The only module that talks to S3. Layout: ``s3://<bucket>/<prefix>/<namespace>/<uid>/<kind>/<sha256>``
with the sha256 also kept in the object's metadata. Bodies below
``multipart_threshold`` go in one PUT; larger ones in a multipart upload, which S3
makes visible only when it completes (a failed upload is aborted), so no reader
ever sees a partial object. The bucket must already exist; the store never
creates buckets (that is an infrastructure decision, with its own policies).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, Literal
from urllib.parse import urlsplit

import boto3
import botocore.exceptions as boto_errors
from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from swerollout.store.base import BlockingBackendStore
from swerollout.store.errors import (
    InvalidRefError,
    NotFoundError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
)
from swerollout.store.models import ObjectKey, Owner

MIB = 1 << 20
MIN_PART_SIZE = 5 * MIB
"""S3 rejects multipart parts below 5 MiB (except the last)."""
SHA256_METADATA = "sha256"

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_AUTH_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403"}
)
_TRANSIENT_CODES = frozenset(
    {
        # The body was damaged or cut short on the way: sending it again may work.
        "BadDigest",
        "IncompleteBody",
        "RequestTimeout",
        # Overload and server faults.
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ServiceUnavailable",
        "InternalError",
        "500",
        "503",
        "429",
    }
)


class S3Options(BaseModel):
    """Options of ``open_store("s3://bucket/prefix", **options)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint_url: str | None = None
    """Base URL of an S3-compatible server (``http://minio:9000``); None = AWS S3."""
    region: str | None = None
    """Region name; None = from the environment / AWS config."""
    access_key_id: str | None = None
    """Explicit credentials; None = boto's usual chain (environment, config files,
    web identity, instance metadata). Give both key id and secret, or neither."""
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    connect_timeout: float = Field(default=5.0, gt=0)
    """Seconds to wait for a TCP connection."""
    read_timeout: float = Field(default=60.0, gt=0)
    """Seconds to wait for a response (or the next chunk of a body)."""
    max_attempts: int = Field(default=5, ge=1)
    """Total tries of one request, including the first (boto's 'standard' retry mode:
    transient errors and throttling, with jittered exponential backoff)."""
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    """Bucket in the path or the host name; most self-hosted servers want 'path'."""
    multipart_threshold: int = Field(default=64 * MIB, ge=MIN_PART_SIZE)
    """Bodies of at least this many bytes are uploaded in parts."""
    multipart_chunksize: int = Field(default=16 * MIB, ge=MIN_PART_SIZE)
    """Size of each part of a multipart upload (the last may be smaller)."""
    max_workers: int = Field(default=16, ge=1)
    """Requests in flight at once (threads, and the size of boto's connection pool)."""
    send_checksums: bool = True
    """Send each body's SHA-256 / MD5 so the server refuses bytes damaged in transit.
    Turn off only for an S3-compatible server that rejects the checksum headers."""

    @model_validator(mode="after")
    def _both_keys_or_neither(self) -> S3Options:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("give both access_key_id and secret_access_key, or neither (to use the environment)")
        return self


class S3Store(BlockingBackendStore):
    """:class:`swerollout.store.protocol.ResultStore` on an S3 bucket."""

    def __init__(self, bucket: str, prefix: str = "", options: S3Options | None = None) -> None:
        self._options = options or S3Options()
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        if not bucket or "/" in bucket:
            raise StoreConfigError(f"invalid S3 bucket name {bucket!r}")
        if any(part in ("", ".", "..") for part in self._prefix.split("/")) and self._prefix:
            raise StoreConfigError(f"invalid S3 key prefix {prefix!r}: empty, '.' or '..' segments")
        self._key_prefix = f"{self._prefix}/" if self._prefix else ""
        super().__init__(
            f"s3://{bucket}/{self._prefix}" if self._prefix else f"s3://{bucket}", max_workers=self._options.max_workers
        )
        opts = self._options
        config = Config(
            connect_timeout=opts.connect_timeout,
            read_timeout=opts.read_timeout,
            retries={"mode": "standard", "total_max_attempts": opts.max_attempts},
            s3={"addressing_style": opts.addressing_style},
            max_pool_connections=opts.max_workers,
            # Without our own checksums, stop boto adding its default ones too.
            request_checksum_calculation="when_supported" if opts.send_checksums else "when_required",
        )
        with _mapped_boto_errors("creating the S3 client", bucket):
            self._client: Any = boto3.session.Session().client(
                "s3",
                endpoint_url=opts.endpoint_url,
                region_name=opts.region,
                aws_access_key_id=opts.access_key_id,
                aws_secret_access_key=opts.secret_access_key.get_secret_value() if opts.secret_access_key else None,
                aws_session_token=opts.session_token.get_secret_value() if opts.session_token else None,
                config=config,
            )

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any]) -> S3Store:
        parts = urlsplit(url)
        if not parts.netloc or parts.query or parts.fragment:
            raise StoreConfigError(f"S3 store URL {url!r} must look like s3://bucket or s3://bucket/prefix")
        try:
            parsed = S3Options(**options)
        except ValidationError as exc:
            raise StoreConfigError(f"invalid options for the S3 store: {exc}") from exc
        return cls(parts.netloc, parts.path, parsed)

    @property
    def bucket(self) -> str:
        return self._bucket

    # -- keys and refs --

    def _s3_key(self, key: ObjectKey) -> str:
        return f"{self._key_prefix}{key}"

    def _ref(self, key: ObjectKey) -> str:
        return f"s3://{self._bucket}/{self._s3_key(key)}"

    def _parse_ref(self, ref: str) -> ObjectKey:
        if not isinstance(ref, str):
            raise InvalidRefError(f"a ref must be a string, got {type(ref).__name__}")
        prefix = f"s3://{self._bucket}/{self._key_prefix}"
        if not ref.startswith(prefix):
            raise InvalidRefError(f"ref {ref!r} is not inside this store ({self.url})")
        return ObjectKey.parse(ref[len(prefix) :], ref=ref)

    # -- primitives --

    def _write(self, key: ObjectKey, body: BinaryIO, size: int) -> None:
        with _mapped_boto_errors(f"uploading {self._ref(key)}", self._bucket):
            if size >= self._options.multipart_threshold:
                self._write_multipart(key, body)
                return
            data = body.read()
            extra: dict[str, str] = {}
            if self._options.send_checksums:
                # The server verifies the body against this, so a body damaged in
                # transit is refused (BadDigest, retryable) rather than stored.
                extra["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(key.sha256)).decode("ascii")
            self._client.put_object(
                Bucket=self._bucket,
                Key=self._s3_key(key),
                Body=data,
                ContentType="application/octet-stream",
                Metadata={SHA256_METADATA: key.sha256},
                **extra,
            )

    def _write_multipart(self, key: ObjectKey, body: BinaryIO) -> None:
        s3_key = self._s3_key(key)
        upload_id = self._client.create_multipart_upload(
            Bucket=self._bucket,
            Key=s3_key,
            ContentType="application/octet-stream",
            Metadata={SHA256_METADATA: key.sha256},
        )["UploadId"]
        try:
            parts = []
            number = 0
            while chunk := body.read(self._options.multipart_chunksize):
                number += 1
                part_extra: dict[str, str] = {}
                if self._options.send_checksums:
                    digest = hashlib.md5(chunk, usedforsecurity=False).digest()
                    part_extra["ContentMD5"] = base64.b64encode(digest).decode("ascii")
                response = self._client.upload_part(
                    Bucket=self._bucket, Key=s3_key, UploadId=upload_id, PartNumber=number, Body=chunk, **part_extra
                )
                parts.append({"PartNumber": number, "ETag": response["ETag"]})
            self._client.complete_multipart_upload(
                Bucket=self._bucket, Key=s3_key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            # Parts of an unfinished upload cost storage until aborted.
            try:
                self._client.abort_multipart_upload(Bucket=self._bucket, Key=s3_key, UploadId=upload_id)
            except (boto_errors.BotoCoreError, boto_errors.ClientError):
                pass  # the original failure is the one to report
            raise

    def _head(self, key: ObjectKey) -> dict[str, Any] | None:
        try:
            with _mapped_boto_errors(f"checking {self._ref(key)}", self._bucket):
                head: dict[str, Any] = self._client.head_object(Bucket=self._bucket, Key=self._s3_key(key))
                return head
        except NotFoundError:
            return None

    def _stored_intact(self, key: ObjectKey, size: int) -> bool:
        # Reading the whole object back to hash it would double the traffic of a
        # retry; size plus the recorded sha256 catches truncation and foreign writes.
        head = self._head(key)
        return (
            head is not None
            and head.get("ContentLength") == size
            and head.get("Metadata", {}).get(SHA256_METADATA) == key.sha256
        )

    def _read(self, key: ObjectKey) -> bytes:
        ref = self._ref(key)
        try:
            with _mapped_boto_errors(f"downloading {ref}", self._bucket):
                response = self._client.get_object(Bucket=self._bucket, Key=self._s3_key(key))
                body: bytes = response["Body"].read()
                return body
        except NotFoundError:
            raise NotFoundError(f"object {ref!r} does not exist in the store") from None

    def _iter_chunks(self, key: ObjectKey, chunk_size: int) -> Generator[bytes, None, None]:
        ref = self._ref(key)
        try:
            with _mapped_boto_errors(f"downloading {ref}", self._bucket):
                body = self._client.get_object(Bucket=self._bucket, Key=self._s3_key(key))["Body"]
        except NotFoundError:
            raise NotFoundError(f"object {ref!r} does not exist in the store") from None
        try:
            with _mapped_boto_errors(f"downloading {ref}", self._bucket):
                while chunk := body.read(chunk_size):
                    yield chunk
        finally:
            body.close()

    def _exists(self, key: ObjectKey) -> bool:
        return self._head(key) is not None

    def _list_keys(self, prefix: str) -> Iterator[tuple[str, int]]:
        with _mapped_boto_errors(f"listing s3://{self._bucket}/{prefix}", self._bucket):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield item["Key"], int(item["Size"])

    def _list(self, owner: Owner | None) -> Iterator[tuple[ObjectKey, int]]:
        prefix = self._key_prefix + (owner.prefix if owner else "")
        for s3_key, size in self._list_keys(prefix):
            try:
                key = ObjectKey.parse(s3_key[len(self._key_prefix) :], ref=f"s3://{self._bucket}/{s3_key}")
            except InvalidRefError:
                continue  # not one of ours; never count or serve it
            yield key, size

    def _delete_owner(self, owner: Owner) -> int:
        prefix = self._key_prefix + owner.prefix
        deleted = 0
        with _mapped_boto_errors(f"deleting the objects of {owner.prefix}", self._bucket):
            self._abort_uploads(prefix)
            batch: list[str] = []
            for s3_key, _size in self._list_keys(prefix):
                batch.append(s3_key)
                if len(batch) == 1000:  # the DeleteObjects limit
                    deleted += self._delete_batch(batch)
                    batch = []
            if batch:
                deleted += self._delete_batch(batch)
        return deleted

    def _delete_batch(self, keys: list[str]) -> int:
        response = self._client.delete_objects(
            Bucket=self._bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
        )
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise StoreUnavailable(
                f"S3 refused to delete {len(errors)} of {len(keys)} objects "
                f"(first: {first.get('Key')}: {first.get('Code')} {first.get('Message')}); try again"
            )
        return len(keys)

    def _abort_uploads(self, prefix: str) -> None:
        paginator = self._client.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix):
            for upload in page.get("Uploads", []):
                self._client.abort_multipart_upload(Bucket=self._bucket, Key=upload["Key"], UploadId=upload["UploadId"])

    def _check(self) -> None:
        with _mapped_boto_errors(f"checking bucket {self._bucket!r}", self._bucket):
            try:
                self._client.head_bucket(Bucket=self._bucket)
            except boto_errors.ClientError as exc:
                if _error_code(exc) in _NOT_FOUND_CODES | {"NoSuchBucket"}:
                    raise StoreConfigError(_missing_bucket(self._bucket)) from exc
                raise

    def _close(self) -> None:
        self._client.close()


def _error_code(exc: boto_errors.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _missing_bucket(bucket: str) -> str:
    return f"S3 bucket {bucket!r} does not exist; create it (the store never creates buckets) or fix the store URL"


@contextmanager
def _mapped_boto_errors(what: str, bucket: str) -> Iterator[None]:
    """Turn botocore's exceptions into the store's errors, naming what was being done."""
    try:
        yield
    except StoreError:
        raise
    except boto_errors.ClientError as exc:
        code = _error_code(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = exc.response.get("Error", {}).get("Message", "") or code
        if code == "NoSuchBucket":
            raise StoreConfigError(f"{what}: {_missing_bucket(bucket)}") from exc
        if code in _NOT_FOUND_CODES or status == 404:
            raise NotFoundError(f"{what}: not found") from exc
        if code in _AUTH_CODES or status == 403:
            raise StoreConfigError(
                f"{what}: access denied ({code}: {message}); check the credentials and the bucket policy"
            ) from exc
        if code in _TRANSIENT_CODES or status >= 500 or status == 429:
            raise StoreUnavailable(f"{what}: S3 failed transiently ({code}: {message})") from exc
        raise StoreError(f"{what}: S3 refused the request ({code}: {message})") from exc
    except (boto_errors.NoCredentialsError, boto_errors.PartialCredentialsError) as exc:
        raise StoreConfigError(
            f"{what}: no usable S3 credentials ({exc}); set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "or pass access_key_id/secret_access_key"
        ) from exc
    except (boto_errors.ConnectionError, boto_errors.HTTPClientError, boto_errors.IncompleteReadError) as exc:
        raise StoreUnavailable(f"{what}: cannot reach S3 ({exc})") from exc
    except boto_errors.BotoCoreError as exc:
        raise StoreError(f"{what}: {exc}") from exc
