"""A compact, versioned, checksummed container for token data plus a JSON header.

Layout (all integers little-endian)::

    magic    4 bytes  b"SWRB"
    version  u16      container format version (FORMAT_VERSION)
    flags    u16      bit 0: body is zlib-compressed
    sha256   32 bytes of the body as stored (after compression)
    length   u64      stored body length in bytes
    body              [u32 header length][header JSON][array 0][array 1]...

The header JSON holds ``kind`` (what the blob is: "trajectory", "snapshot", ...),
the caller's ``meta`` document and, per array, its name, numpy dtype string and
element count; arrays follow in that order, packed with no padding. Readers reject
an unknown magic, a newer format version, a wrong checksum, a truncated blob and a
kind they did not ask for, each with its own error and a message saying what to do.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

MAGIC = b"SWRB"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sHH32sQ")
_FLAG_ZLIB = 1
# Only fixed-size little-endian numeric dtypes are allowed in a blob.
_DTYPES = {"<i4", "<i8", "|u1", "<u2", "<u4", "<f4", "<f8"}


class CodecError(ValueError):
    """Root error of the wire codec; a blob that fails to decode never decodes on retry."""


class CorruptBlobError(CodecError):
    """Wrong magic, wrong checksum, truncated or inconsistent content."""


class UnsupportedVersionError(CodecError):
    """The blob was written by a newer format (or for another kind) than this reader knows."""


@dataclass(frozen=True)
class Decoded:
    kind: str
    meta: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]


def encode(
    kind: str,
    meta: Mapping[str, Any],
    arrays: Mapping[str, npt.ArrayLike] | None = None,
    *,
    dtypes: Mapping[str, str] | None = None,
    compress: bool = True,
) -> bytes:
    """Pack ``meta`` (JSON-able) and named numeric arrays into one blob."""
    packed: list[bytes] = []
    described: list[dict[str, Any]] = []
    for name, values in (arrays or {}).items():
        wanted = (dtypes or {}).get(name)
        array = np.asarray(values, dtype=np.dtype(wanted) if wanted else None)
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        array = np.ascontiguousarray(array.astype(dtype, copy=False)).reshape(-1)
        if dtype.str not in _DTYPES:
            raise CodecError(f"array {name!r} has dtype {dtype.str}; allowed: {sorted(_DTYPES)}")
        described.append({"name": name, "dtype": dtype.str, "count": int(array.size)})
        packed.append(array.tobytes())
    header = json.dumps(
        {"kind": kind, "meta": dict(meta), "arrays": described}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    body = b"".join([struct.pack("<I", len(header)), header, *packed])
    flags = 0
    if compress:
        # Level 1: token arrays barely compress further at higher levels, and it is 5x faster.
        body, flags = zlib.compress(body, 1), _FLAG_ZLIB
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, flags, hashlib.sha256(body).digest(), len(body)) + body


def decode(blob: bytes, *, kind: str | None = None) -> Decoded:
    """Unpack a blob; ``kind`` (if given) must match what the writer declared."""
    if len(blob) < _PREFIX.size:
        raise CorruptBlobError(f"blob is {len(blob)} bytes, shorter than the {_PREFIX.size}-byte prefix")
    magic, version, flags, digest, length = _PREFIX.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptBlobError(f"not a swerollout blob (magic {magic!r}, expected {MAGIC!r})")
    if version > FORMAT_VERSION:
        raise UnsupportedVersionError(
            f"blob uses container format v{version}; this swerollout reads up to v{FORMAT_VERSION}: upgrade the reader"
        )
    body = blob[_PREFIX.size :]
    if len(body) != length:
        raise CorruptBlobError(f"blob body is {len(body)} bytes, header says {length}: truncated or padded")
    if hashlib.sha256(body).digest() != digest:
        raise CorruptBlobError("blob checksum mismatch: the data was corrupted in storage or transfer")
    if flags & _FLAG_ZLIB:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise CorruptBlobError(f"blob body does not decompress: {exc}") from exc
    try:
        (header_len,) = struct.unpack_from("<I", body)
        header = json.loads(body[4 : 4 + header_len])
        found_kind, meta, described = header["kind"], header["meta"], header["arrays"]
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise CorruptBlobError(f"blob header is unreadable: {exc}") from exc
    if kind is not None and found_kind != kind:
        raise UnsupportedVersionError(f"blob holds a {found_kind!r}, expected a {kind!r}")
    arrays: dict[str, npt.NDArray[Any]] = {}
    offset = 4 + header_len
    for item in described:
        dtype = np.dtype(item["dtype"])
        if dtype.str not in _DTYPES:
            raise CorruptBlobError(f"array {item['name']!r} has unsupported dtype {dtype.str}")
        size = dtype.itemsize * int(item["count"])
        if offset + size > len(body):
            raise CorruptBlobError(f"array {item['name']!r} runs past the end of the blob")
        arrays[item["name"]] = np.frombuffer(body, dtype=dtype, count=int(item["count"]), offset=offset)
        offset += size
    if offset != len(body):
        raise CorruptBlobError(f"{len(body) - offset} unexplained bytes after the last array")
    return Decoded(kind=found_kind, meta=meta, arrays=arrays)


def sha256_hex(blob: bytes) -> str:
    """The digest stored next to a blob reference (status, result store)."""
    return hashlib.sha256(blob).hexdigest()
