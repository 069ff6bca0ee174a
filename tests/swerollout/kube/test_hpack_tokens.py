"""The API client's HTTP/2 header coding: a long value (the bearer token) is Huffman-coded
once and sent again as the same bytes; the header block still decodes to the same headers
with the token never indexed (never in the compression table)."""

from __future__ import annotations

import secrets

import hpack
from hpack import NeverIndexedHeaderTuple
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from swerollout.kube import _hpack


def _headers(token: bytes, path: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"PATCH"),
        (b":scheme", b"https"),
        (b":authority", b"127.0.0.1:6443"),
        (b":path", path),
        NeverIndexedHeaderTuple(b"authorization", token),
        (b"content-type", b"application/merge-patch+json"),
    ]


def test_long_values_are_coded_once_and_the_block_decodes_the_same() -> None:
    plain = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)
    token = b"Bearer " + secrets.token_urlsafe(900).encode()
    path = b"/apis/swerollout.io/v1alpha1/namespaces/bench/swerollouts/r0001/status"
    want = [_hpack._plain_encode(plain, v) for v in (token, path)]
    _hpack.install()
    assert plain.encode(token) == want[0] and plain.encode(path) == want[1]
    assert plain.encode(token) is plain.encode(token)  # remembered, not coded again
    assert len(path) < _hpack.LONG_BYTES  # a path is coded each time (short, and one per object)

    encoder, decoder = hpack.Encoder(), hpack.Decoder()
    for i in range(3):
        headers = _headers(token, path.replace(b"r0001", f"r{i:04d}".encode()))
        decoded = decoder.decode(encoder.encode(headers), raw=True)
        assert decoded == [(k, v) for k, v in headers]
        assert isinstance(decoded[4], NeverIndexedHeaderTuple)  # the token stays out of the table
    assert all(value != token for _, value in encoder.header_table.dynamic_entries)


def test_what_is_remembered_is_bounded() -> None:
    _hpack.install()
    coder = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)
    for _ in range(3 * _hpack.KEPT):
        coder.encode(secrets.token_urlsafe(400).encode())  # rotated tokens
    assert 0 < _hpack.remembered() <= _hpack.KEPT
