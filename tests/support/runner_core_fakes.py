"""A small SGLang-shaped aiohttp server with scripted faults (runner-core tests).

Each request to /generate consumes the next scripted behaviour (default: answer).
It is a real HTTP server on 127.0.0.1 so the client's real transport, timeouts and
connection handling are exercised; it is only used for failure injection. The real
SGLang-compatible policy server is used where it is available.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

# One SWE-bench-shaped instance for the policy server's oracle policy.
ORACLE_INSTANCE = {
    "instance_id": "demo__greet-1",
    "problem_statement": "greet() should say 'Hello, NAME!'",
    "patch": "diff --git a/greet.py b/greet.py\n--- a/greet.py\n+++ b/greet.py\n@@ -1 +1 @@\n-x\n+y\n",
}


@dataclass
class Behaviour:
    kind: str = "ok"
    """ok | drop | status | hang | abort"""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    output_ids: list[int] | None = None


@dataclass
class FakeSGLang:
    url: str = ""
    script: list[Behaviour] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    weight_version: str = "w1"
    default_output: list[int] = field(default_factory=lambda: [11, 12, 13])
    routed_width: int | None = None
    """When set, answer return_routed_experts in SGLang's shape: int32 rows
    ``[seqlen - 1 - routed_experts_start_len, width]``, row p = [p*10, p*10+1, ...]."""
    server_info: dict[str, Any] | None = None
    meta_patches: list[dict[str, Any]] = field(default_factory=list)
    """Merged into the next answers' meta_info, one per answer."""
    """The /get_server_info body (404 when None)."""

    def answer(self, payload: dict[str, Any], output: list[int], finish: str = "stop") -> dict[str, Any]:
        return {
            "text": "".join(f"<{t}>" for t in output),
            "output_ids": output,
            "meta_info": {
                "id": payload["rid"],
                "prompt_tokens": len(payload["input_ids"]),
                "completion_tokens": len(output),
                "weight_version": self.weight_version,
                "finish_reason": {"type": finish, "matched": output[-1] if output else None}
                if finish != "abort"
                else {"type": "abort", "message": "aborted", "status_code": 503, "err_type": None},
                "output_token_logprobs": [[-0.1 * (i + 1), t, None] for i, t in enumerate(output)],
                "a_field_from_a_newer_sglang": {"x": 1},
                **self._routed(payload, output),
                **(self.meta_patches.pop(0) if self.meta_patches else {}),
            },
        }

    def _routed(self, payload: dict[str, Any], output: list[int]) -> dict[str, Any]:
        if self.routed_width is None or not payload.get("return_routed_experts"):
            return {}
        seqlen = len(payload["input_ids"]) + len(output)
        start = int(payload.get("routed_experts_start_len", 0))
        values = [p * 10 + k for p in range(start, seqlen - 1) for k in range(self.routed_width)]
        raw = b"".join(v.to_bytes(4, "little", signed=True) for v in values)
        return {"routed_experts": base64.b64encode(raw).decode("ascii")}
