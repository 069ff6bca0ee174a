"""The bearer token's HTTP/2 header coding, worked out once per token, not per request.

h2 sends `authorization` as a never-indexed field (RFC 7541 section 7.1.3: a secret must
not enter the connection's compression table), so hpack Huffman-codes it again for
every request, in pure Python. A ServiceAccount token is about 1 KB: half a millisecond
of CPU per request (18% of the operator's samples in a burst of 1,000 pods, py-spy under
tracemalloc). The Huffman code of a value depends on nothing but the value (HPACK has
one static code table), so the code of a long value is kept and sent again; the field
stays never-indexed on the wire, only the CPU is saved.
"""

from __future__ import annotations

from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES

LONG_BYTES = 256
"""Values at least this long are remembered: tokens, not paths or names (short, and many)."""
KEPT = 8
"""Values remembered at most (a rotated token replaces the old one; all are forgotten when full)."""

_plain_encode = HuffmanEncoder.encode
_coded: dict[bytes, bytes] = {}


def _encode(self: HuffmanEncoder, data: bytes | None) -> bytes:
    if not data or len(data) < LONG_BYTES or self.huffman_code_list is not REQUEST_CODES:
        return _plain_encode(self, data)
    coded = _coded.get(data)
    if coded is None:
        if len(_coded) >= KEPT:
            _coded.clear()
        coded = _coded[data] = _plain_encode(self, data)
    return coded


def install() -> None:
    """Make every hpack encoder of this process remember its long values (idempotent)."""
    HuffmanEncoder.encode = _encode  # type: ignore[method-assign,assignment]


def remembered() -> int:
    """How many values are remembered now."""
    return len(_coded)
