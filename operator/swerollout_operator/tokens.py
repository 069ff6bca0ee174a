"""Per-rollout credentials, derived rather than stored.

Each rollout's ingest token (what its runner presents to the operator) and swerex
token (what the runner presents to its sandbox) are HMACs of the operator's key
over the rollout's identity. The operator can therefore check any token after a
restart without reading a Secret back, and a token never authenticates another
rollout, or another incarnation of the same name (the uid is part of it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import Enum
from pathlib import Path


class TokenKind(str, Enum):
    INGEST = "ingest"
    SWEREX = "swerex"


class TokenKey:
    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the operator token key must be at least 32 bytes")
        self._key = key

    @classmethod
    def from_file(cls, path: Path) -> TokenKey:
        data = path.read_bytes().strip()
        if len(data) < 32:
            raise ValueError(f"{path}: the operator token key must be at least 32 bytes; regenerate it")
        return cls(data)

    @classmethod
    def random(cls) -> TokenKey:
        return cls(secrets.token_bytes(32))

    def derive(self, kind: TokenKind, namespace: str, name: str, uid: str) -> str:
        message = "\x00".join((kind.value, namespace, name, uid)).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(self, token: str, kind: TokenKind, namespace: str, name: str, uid: str) -> bool:
        expected = self.derive(kind, namespace, name, uid)
        return hmac.compare_digest(expected.encode(), token.encode())
