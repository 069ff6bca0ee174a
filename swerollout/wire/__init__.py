"""Binary wire formats shared by the runner, the operator and the trainer client.

``codec`` is the versioned, checksummed container; ``trajectory`` is the result of
one rollout (what a trainer decodes).
"""

from swerollout.wire.codec import (
    CodecError,
    CorruptBlobError,
    Decoded,
    UnsupportedVersionError,
    decode,
    encode,
)

__all__ = ["CodecError", "CorruptBlobError", "Decoded", "UnsupportedVersionError", "decode", "encode"]
