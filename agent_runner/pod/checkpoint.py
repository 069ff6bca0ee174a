"""Per-turn checkpoints: what a replay into a fresh pod needs, recorded at every turn boundary.

A checkpoint is a chain of segments in the result store (object kind ``checkpoint``).
Each segment holds only what its turn added since the segment before it (its parent):

- the tail of the token arrays (ids, mask, logprobs, version indices),
- the tail of the append-only lists of the model state (messages, per-request records,
  routing rows) and the rest of that state in full (a few hundred bytes),
- the agent loop's state, and the working tree as a diff against the base commit, but
  only when the diff differs from its parent's (most turns only read files).

Every ``FULL_EVERY`` segments one is written whole (no parent), which bounds what a replay
reads. A segment names its parent by sha256; the chain is restored by walking from the
head to a whole segment and concatenating, each step checked (lengths must meet where the
parent ended). The result is exactly the Snapshot an abort at that boundary would have
written, so a replay restores it the way it restores an abort's.

Off the critical path: ``capture`` (called at the turn boundary) only copies the tails
(O(new tokens)); the diff, the encoding and the upload run in a background task while the
next /generate is in flight. ``settle`` (called before the next action touches the
sandbox) waits for that diff, so the recorded tree is the one the tokens describe.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_runner.policy.errors import SnapshotError
from agent_runner.policy.rl_model import SNAPSHOT_SCHEMA, ModelState, Snapshot
from agent_runner.policy.tokens import TokenBuffer
from swerollout.wire.codec import CodecError, decode, encode

log = logging.getLogger(__name__)

CHECKPOINT_KIND = "checkpoint"
CHECKPOINT_SCHEMA = 1
FULL_EVERY = 32
"""A whole segment every this many: a replay reads at most this many objects."""
_LISTS = ("messages", "turns", "routed_experts")
"""ModelState fields that only ever grow: a segment carries their new tail."""
_DTYPES = {"input_ids": "<i4", "logprobs": "<f4", "version_index": "<u2"}


@dataclass(frozen=True)
class Lengths:
    """Where a segment's content ends (and its child's begins)."""

    tokens: int = 0
    messages: int = 0
    turns: int = 0
    routed_experts: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "tokens": self.tokens,
            "messages": self.messages,
            "turns": self.turns,
            "routed_experts": self.routed_experts,
        }


@dataclass(frozen=True)
class Head:
    """The newest stored segment of a chain."""

    sha256: str
    bytes: int
    lengths: Lengths
    depth: int
    """Segments from the last whole one to this one, both included."""
    diff_sha256: str
    chain_bytes: int
    """Bytes of every segment the chain's restore reads."""


@dataclass(frozen=True)
class Capture:
    """What one turn boundary added, copied at the boundary (the model moves on at once)."""

    since: Lengths
    """Where the tails start (zero: the whole state)."""
    lengths: Lengths
    arrays: dict[str, Any]
    lists: dict[str, list[Any]]
    state: dict[str, Any]
    versions: list[str | None]
    prompt_length: int
    agent_state: dict[str, Any]
    turns: int
    sampled: int


@dataclass(frozen=True)
class Written:
    """A segment that reached the store: what the operator is told."""

    ref: Any
    """The store's reference to the head (wire.StoredObjectRef)."""
    segments: int
    turns: int
    tokens: int
    sampled_tokens: int
    chain_bytes: int


def _lengths(state: ModelState, buffer: TokenBuffer) -> Lengths:
    return Lengths(
        tokens=len(buffer.input_ids),
        messages=len(state.messages),
        turns=len(state.turns),
        routed_experts=len(state.routed_experts),
    )


def capture(
    state: ModelState, buffer: TokenBuffer, agent_state: dict[str, Any], since: Lengths, *, turns: int
) -> Capture:
    """The tails after ``since`` (all of it when ``since`` is zero). Copies, never views:
    the lists keep growing after this returns."""
    now = _lengths(state, buffer)
    start = since.tokens
    rest = state.model_dump(mode="json", exclude=set(_LISTS))
    return Capture(
        since=since,
        lengths=now,
        arrays={
            "input_ids": buffer.input_ids[start:],
            "loss_mask": bytes(buffer.loss_mask[start:]),
            "logprobs": buffer.logprobs[start:],
            "version_index": buffer.version_index[start:],
        },
        lists={
            "messages": list(state.messages[since.messages :]),
            "turns": [t.model_dump(mode="json") for t in state.turns[since.turns :]],
            "routed_experts": list(state.routed_experts[since.routed_experts :]),
        },
        state=rest,
        versions=list(buffer.versions),
        prompt_length=buffer.prompt_length,
        agent_state=agent_state,
        turns=turns,
        sampled=state.sampled_total,
    )


def grew_from(state: ModelState, buffer: TokenBuffer, since: Lengths) -> bool:
    """Whether everything ``since`` describes is still a prefix of the state (it only grows)."""
    now = _lengths(state, buffer)
    return all(getattr(now, f) >= getattr(since, f) for f in ("tokens", "messages", "turns", "routed_experts"))


def encode_segment(c: Capture, parent: Head | None, diff: str | None) -> bytes:
    """One segment; ``diff`` None means unchanged from the parent's."""
    agent_state = dict(c.agent_state)
    if diff is not None:
        agent_state["workdir_diff"] = diff
    meta = {
        "schema_version": CHECKPOINT_SCHEMA,
        "snapshot_schema": SNAPSHOT_SCHEMA,
        "parent": {"sha256": parent.sha256, "bytes": parent.bytes} if parent else None,
        "since": c.since.as_dict(),
        "lengths": c.lengths.as_dict(),
        "state": c.state,
        "lists": c.lists,
        "agent_state": agent_state,
        "versions": c.versions,
        "prompt_length": c.prompt_length,
    }
    arrays = {
        "input_ids": c.arrays["input_ids"],
        "loss_mask": np.frombuffer(c.arrays["loss_mask"], dtype="|u1"),
        "logprobs": c.arrays["logprobs"],
        "version_index": c.arrays["version_index"],
    }
    return encode(CHECKPOINT_KIND, meta, arrays, dtypes=_DTYPES)


def _rebase(c: Capture, since: Lengths) -> Capture:
    """The capture's tails from ``since`` on (``since`` at or after ``c.since``)."""
    if since == c.since:
        return c
    cut = since.tokens - c.since.tokens
    lists = {name: c.lists[name][getattr(since, name) - getattr(c.since, name) :] for name in _LISTS}
    arrays = {name: values[cut:] for name, values in c.arrays.items()}
    return Capture(
        since=since,
        lengths=c.lengths,
        arrays=arrays,
        lists=lists,
        state=c.state,
        versions=c.versions,
        prompt_length=c.prompt_length,
        agent_state=c.agent_state,
        turns=c.turns,
        sampled=c.sampled,
    )


def is_checkpoint(blob: bytes) -> bool:
    try:
        return decode(blob).kind == CHECKPOINT_KIND
    except CodecError:
        return False


async def restore_chain(head: bytes, fetch: Callable[[str, int], Awaitable[bytes]]) -> tuple[Snapshot, Head]:
    """The Snapshot a chain describes, and its head (to continue the chain from).

    ``fetch(sha256, bytes)`` reads a parent segment. Raises SnapshotError naming what
    does not fit (a missing parent, lengths that do not meet, a newer schema)."""
    segments: list[tuple[dict[str, Any], dict[str, Any], int]] = []
    blob, chain_bytes = head, 0
    while True:
        try:
            decoded = decode(blob, kind=CHECKPOINT_KIND)
        except CodecError as exc:
            raise SnapshotError(f"cannot restore checkpoint segment: {exc}") from exc
        meta = decoded.meta
        if not isinstance(meta.get("schema_version"), int) or meta["schema_version"] > CHECKPOINT_SCHEMA:
            raise SnapshotError(
                f"checkpoint schema v{meta.get('schema_version')} is not readable by this runner "
                f"(reads up to v{CHECKPOINT_SCHEMA})"
            )
        segments.append((meta, dict(decoded.arrays), len(blob)))
        chain_bytes += len(blob)
        parent = meta.get("parent")
        if parent is None:
            break
        if len(segments) > FULL_EVERY * 4:
            raise SnapshotError(f"checkpoint chain longer than {FULL_EVERY * 4} segments without a whole one")
        blob = await fetch(str(parent["sha256"]), int(parent["bytes"]))
    segments.reverse()
    ids: list[int] = []
    mask = bytearray()
    logprobs: list[float] = []
    version_index: list[int] = []
    lists: dict[str, list[Any]] = {name: [] for name in _LISTS}
    diff_sha = ""
    diff = ""
    for meta, arrays, _ in segments:
        since = meta["since"]
        have = {"tokens": len(ids), **{name: len(lists[name]) for name in _LISTS}}
        if since != have:
            raise SnapshotError(f"checkpoint segment starts at {since}, its parent ends at {have}")
        ids.extend(arrays["input_ids"].tolist())
        mask.extend(arrays["loss_mask"].tobytes())
        logprobs.extend(arrays["logprobs"].astype(float).tolist())
        version_index.extend(arrays["version_index"].tolist())
        for name in _LISTS:
            lists[name].extend(meta["lists"][name])
        if "workdir_diff" in meta["agent_state"]:
            diff = str(meta["agent_state"]["workdir_diff"])
            diff_sha = hashlib.sha256(diff.encode()).hexdigest()
        if {"tokens": len(ids), **{n: len(lists[n]) for n in _LISTS}} != meta["lengths"]:
            raise SnapshotError(f"checkpoint segment ends at {meta['lengths']}, its content at {len(ids)} tokens")
    last = segments[-1][0]
    try:
        buffer = TokenBuffer(
            input_ids=ids,
            loss_mask=mask,
            logprobs=logprobs,
            version_index=version_index,
            versions=list(last["versions"]),
            prompt_length=int(last["prompt_length"]),
        )
        buffer.check()
        state = ModelState.model_validate({**last["state"], **lists})
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"checkpoint content is inconsistent: {exc}") from exc
    agent_state = {**last["agent_state"], "workdir_diff": diff}
    lengths = Lengths(**last["lengths"])
    top = Head(
        sha256=hashlib.sha256(head).hexdigest(),
        bytes=len(head),
        lengths=lengths,
        depth=len(segments),
        diff_sha256=diff_sha,
        chain_bytes=chain_bytes,
    )
    return Snapshot(state=state, agent_state=agent_state, buffer=buffer), top


Diff = Callable[[], Awaitable[str]]
Upload = Callable[[bytes], Awaitable[Any]]
OnWritten = Callable[[Written], Awaitable[None]]


class CheckpointWriter:
    """Writes one segment per turn boundary, in order, in the background.

    A segment that fails to upload is not a parent: the next one starts where the last
    stored one ended, so a lost upload costs bytes, never a hole in the chain."""

    def __init__(
        self,
        *,
        diff: Diff,
        upload: Upload,
        on_written: OnWritten,
        head: Head | None = None,
        full_every: int = FULL_EVERY,
    ) -> None:
        self._diff = diff
        self._upload = upload
        self._on_written = on_written
        self.head = head
        self.full_every = full_every
        self._last: asyncio.Task[None] | None = None
        self._diffed: asyncio.Event | None = None
        self.capture_seconds: list[float] = []
        """Time each ``capture`` held the turn boundary (the visible cost), for the bench."""
        self.written = 0
        self._planned = head.depth if head is not None else 0
        self.failed = 0

    def capture(self, state: ModelState, buffer: TokenBuffer, agent_state: dict[str, Any], *, turns: int) -> None:
        """Record this turn boundary; returns at once (the write runs in the background)."""
        started = time.perf_counter()
        head = self.head
        # Whether to start a whole segment is decided on the captures (the uploads may lag);
        # where the tails start is the last stored head, which every later head extends.
        whole = self._planned == 0 or self._planned >= self.full_every
        if head is not None and not grew_from(state, buffer, head.lengths):
            whole = True
        self._planned = 1 if whole else self._planned + 1
        since = Lengths() if whole or head is None else head.lengths
        snap = capture(state, buffer, agent_state, since, turns=turns)
        diffed = asyncio.Event()
        previous = self._last
        self._diffed = diffed
        self._last = asyncio.create_task(self._write(snap, whole, previous, diffed))
        self.capture_seconds.append(time.perf_counter() - started)

    async def settle(self) -> None:
        """Wait until the latest capture's working tree is read (call before changing it)."""
        if self._diffed is not None:
            await self._diffed.wait()

    async def drain(self) -> None:
        """Wait for every write begun (the end of a run)."""
        if self._last is not None:
            await asyncio.gather(self._last, return_exceptions=True)

    async def _write(
        self, snap: Capture, whole: bool, previous: asyncio.Task[None] | None, diffed: asyncio.Event
    ) -> None:
        try:
            try:
                diff = await self._diff()
            finally:
                diffed.set()
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            # Heads only move forward, so the head now ends at or after where this
            # capture's tails start: the tails are cut to begin where it ends.
            parent = None if whole else self.head
            since = parent.lengths if parent is not None else Lengths()
            diff_sha = hashlib.sha256(diff.encode()).hexdigest()
            same = parent is not None and parent.diff_sha256 == diff_sha
            blob = await asyncio.to_thread(encode_segment, _rebase(snap, since), parent, None if same else diff)
            ref = await self._upload(blob)
            depth = 1 if parent is None else parent.depth + 1
            chain = len(blob) + (parent.chain_bytes if parent is not None else 0)
            self.head = Head(
                sha256=hashlib.sha256(blob).hexdigest(),
                bytes=len(blob),
                lengths=snap.lengths,
                depth=depth,
                diff_sha256=diff_sha,
                chain_bytes=chain,
            )
            self.written += 1
            await self._on_written(
                Written(
                    ref=ref,
                    segments=depth,
                    turns=snap.turns,
                    tokens=snap.lengths.tokens,
                    sampled_tokens=snap.sampled,
                    chain_bytes=chain,
                )
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a lost checkpoint costs a replay turns, never the run
            self.failed += 1
            log.warning("checkpoint at turn %d not stored: %s", snap.turns, exc)
