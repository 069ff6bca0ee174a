"""The versioned binary container and the trajectory model that rides on it."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from swerollout.wire import CorruptBlobError, UnsupportedVersionError, decode, encode
from swerollout.wire.codec import FORMAT_VERSION, MAGIC, sha256_hex
from swerollout.wire.trajectory import Trajectory


def _trajectory() -> Trajectory:
    return Trajectory(
        run_uid="uid-1",
        prompt_ids=[151644, 8948, 198],
        response_ids=[40, 1079, 151645, 198, 151644, 77091, 198, 9],
        loss_mask=[1, 1, 1, 0, 0, 0, 0, 1],
        logprobs=[-0.25, -1.5, -0.125, 0.0, 0.0, 0.0, 0.0, -3.0],
        weight_versions=["v1", "v1", "v1", None, None, None, None, "v2"],
        messages=[{"role": "user", "content": "fix ünïcode"}],
        exit_status="submitted",
        submission="diff --git a/x b/x\n",
        turns=2,
        timings={"generation": 1.5},
        # 11 tokens -> 11 rows of 2 layers x 2 experts; the last sampled token is never read back (filler)
        routed_experts=np.concatenate([np.arange(40), np.zeros(4)]).astype("<i4").tobytes(),
        routed_experts_width=4,
        routed_experts_forwarded=10,
        info={"rids": ["a.", "b."]},
    )


def test_round_trip_arrays_and_meta() -> None:
    blob = encode(
        "thing", {"a": [1, "x"]}, {"ids": [1, 2, 3], "mask": np.array([0, 1], dtype="|u1")}, dtypes={"ids": "<i4"}
    )
    got = decode(blob, kind="thing")
    assert got.meta == {"a": [1, "x"]}
    assert got.arrays["ids"].dtype.str == "<i4" and got.arrays["ids"].tolist() == [1, 2, 3]
    assert got.arrays["mask"].tolist() == [0, 1]


def test_trajectory_round_trip() -> None:
    original = _trajectory()
    assert Trajectory.from_bytes(original.to_bytes()) == original  # values are float32-exact here


def test_trajectory_routed_experts_one_row_per_token() -> None:
    traj = Trajectory.from_bytes(_trajectory().to_bytes())
    rows = traj.routed_experts_array()
    assert rows is not None and rows.shape == (len(traj.prompt_ids) + len(traj.response_ids), 4)
    assert rows[3].tolist() == [12, 13, 14, 15] and traj.routed_experts_forwarded == 10
    with pytest.raises(ValueError, match="11 rows \\(one per token\\) of routed_experts_width 4 int32 values need 176"):
        Trajectory.model_validate({**_trajectory().model_dump(), "routed_experts": bytes(160)})
    with pytest.raises(ValueError, match="routed_experts_forwarded is 11; with routed_experts it must be 0..10"):
        Trajectory.model_validate({**_trajectory().model_dump(), "routed_experts_forwarded": 11})


def test_trajectory_v2_routed_experts_read_as_one_row_per_token() -> None:
    """A v2 blob stored only the forwarded rows (one fewer than tokens): read with a filler row."""
    v3 = _trajectory()
    meta = v3.model_dump(
        exclude={"prompt_ids", "response_ids", "loss_mask", "logprobs", "weight_versions", "routed_experts"}
    )
    meta.pop("routed_experts_forwarded")
    table: list[str | None] = [None, "v1", "v2"]
    blob = encode(
        "trajectory",
        {**meta, "schema_version": 2, "version_table": table},
        {
            "prompt_ids": v3.prompt_ids,
            "response_ids": v3.response_ids,
            "loss_mask": v3.loss_mask,
            "logprobs": v3.logprobs,
            "version_index": np.array([table.index(v) for v in v3.weight_versions], dtype="<u2"),
            "routed_experts": np.arange(40, dtype="<i4"),
        },
        dtypes={"prompt_ids": "<i4", "response_ids": "<i4", "loss_mask": "|u1", "logprobs": "<f4"},
    )
    got = Trajectory.from_bytes(blob)
    assert got.routed_experts == v3.routed_experts and got.routed_experts_forwarded == 10


def test_trajectory_rejects_misaligned_arrays() -> None:
    with pytest.raises(ValueError, match="loss_mask has 1 entries, response_ids has 2"):
        Trajectory(response_ids=[1, 2], loss_mask=[1], logprobs=[0.0, 0.0], weight_versions=[None, None])


def test_compact_at_scale() -> None:
    n = 32_000
    rng = np.random.default_rng(0)
    traj = Trajectory(
        response_ids=rng.integers(0, 150_000, n).tolist(),
        loss_mask=[1] * n,
        logprobs=(-rng.random(n)).tolist(),
        weight_versions=["v7"] * n,
    )
    blob = traj.to_bytes()
    assert len(blob) < n * (4 + 1 + 4 + 2)  # never more than the raw packed arrays


def test_corruption_is_detected() -> None:
    blob = bytearray(_trajectory().to_bytes())
    blob[-5] ^= 0x01
    with pytest.raises(CorruptBlobError, match="checksum"):
        Trajectory.from_bytes(bytes(blob))


def test_truncation_is_detected() -> None:
    blob = _trajectory().to_bytes()
    with pytest.raises(CorruptBlobError, match="truncated"):
        decode(blob[:-10])
    with pytest.raises(CorruptBlobError, match="shorter"):
        decode(blob[:10])


def test_wrong_magic() -> None:
    with pytest.raises(CorruptBlobError, match="not a swerollout blob"):
        decode(b"PK\x03\x04" + bytes(60))


def test_newer_format_version_is_refused() -> None:
    blob = bytearray(encode("x", {}))
    struct.pack_into("<H", blob, len(MAGIC), FORMAT_VERSION + 1)
    with pytest.raises(UnsupportedVersionError, match=f"v{FORMAT_VERSION + 1}.*upgrade"):
        decode(bytes(blob))


def test_newer_trajectory_schema_is_refused() -> None:
    meta = _trajectory().model_dump(
        exclude={"prompt_ids", "response_ids", "loss_mask", "logprobs", "weight_versions", "routed_experts"}
    )
    meta["schema_version"] = 99
    meta["version_table"] = [None]
    blob = encode(
        "trajectory",
        meta,
        {
            "prompt_ids": np.zeros(0, "<i4"),
            "response_ids": np.zeros(0, "<i4"),
            "loss_mask": np.zeros(0, "|u1"),
            "logprobs": np.zeros(0, "<f4"),
            "version_index": np.zeros(0, "<u2"),
        },
    )
    with pytest.raises(UnsupportedVersionError, match="schema v99"):
        Trajectory.from_bytes(blob)


def test_kind_mismatch() -> None:
    with pytest.raises(UnsupportedVersionError, match="holds a 'snapshot', expected a 'trajectory'"):
        Trajectory.from_bytes(encode("snapshot", {}))


def test_sha256_hex_matches_hashlib() -> None:
    import hashlib

    blob = encode("x", {"k": 1})
    assert sha256_hex(blob) == hashlib.sha256(blob).hexdigest()
