"""Per-turn checkpoints (agent_runner.pod.checkpoint): a chain of segments restores exactly the
snapshot an abort at the same turn boundary would have written, each segment carries only
what its turn added, and a lost upload or a compaction never leaves a hole."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from agent_runner.pod.checkpoint import CheckpointWriter, Written, is_checkpoint, restore_chain
from agent_runner.policy.errors import SnapshotError
from agent_runner.policy.rl_model import RLTokenModel, Snapshot
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from swerollout.backoff import Backoff
from swerollout.tokenizers import load_tokenizer
from tests.support.runner_core_fakes import Behaviour, FakeSGLang

PROMPT = [
    {"role": "system", "content": "You are a software engineer."},
    {"role": "user", "content": "Fix the bug."},
]


class Store:
    """The result store as the runner sees it: put bytes, read them back by sha256."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.uploads = 0
        self.fail = fail or set()

    async def upload(self, blob: bytes) -> str:
        self.uploads += 1
        if self.uploads in self.fail:
            raise OSError("the store is down")
        sha = hashlib.sha256(blob).hexdigest()
        self.objects[sha] = blob
        return sha

    async def fetch(self, sha: str, size: int) -> bytes:
        blob = self.objects[sha]
        assert len(blob) == size
        return blob


def _noise(seed: int, words: int) -> str:
    """Text that does not compress away (each turn adds its own bytes)."""
    return " ".join(hashlib.sha256(f"{seed}-{w}".encode()).hexdigest()[:12] for w in range(words))


def _model(url: str) -> RLTokenModel:
    client = SGLangClient(url, retry=Backoff(attempts=3, first_seconds=0.01))
    return RLTokenModel(
        load_tokenizer("qwen-2.5"),
        client,
        sampling=SamplingParams(max_new_tokens=64),
        max_context_tokens=32768,
        run_uid="uid-ckpt",
    )


def _same(a: Snapshot, b: Snapshot) -> None:
    assert a.buffer.input_ids == b.buffer.input_ids
    assert a.buffer.loss_mask == b.buffer.loss_mask
    assert a.buffer.logprobs == pytest.approx(b.buffer.logprobs, abs=1e-6)
    assert a.buffer.version_index == b.buffer.version_index and a.buffer.versions == b.buffer.versions
    assert a.buffer.prompt_length == b.buffer.prompt_length
    assert a.state == b.state
    assert a.agent_state == b.agent_state


async def _conversation(
    fake: FakeSGLang, turns: int, store: Store, *, full_every: int = 32
) -> tuple[RLTokenModel, CheckpointWriter, list[Written], list[bytes]]:
    """`turns` turns, each a tool reply and a working tree that changes every other turn;
    a checkpoint at each boundary, and the snapshot an abort there would write."""
    tok = load_tokenizer("qwen-2.5")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    model = _model(fake.url)
    model.add_messages(PROMPT)
    tree = {"diff": ""}
    written: list[Written] = []
    expected: list[bytes] = []

    async def diff() -> str:
        await asyncio.sleep(0)
        return tree["diff"]

    async def on_written(w: Written) -> None:
        written.append(w)

    writer = CheckpointWriter(diff=diff, upload=store.upload, on_written=on_written, full_every=full_every)
    for i in range(turns):
        fake.script.append(Behaviour(output_ids=[*tok.encode(_noise(i, 8), add_special_tokens=False), im_end]))
        await model.generate()
        model.add_messages([{"role": "user", "content": _noise(i + 1000, 16)}])
        if i % 2:
            tree["diff"] = f"diff --git a/f b/f\n+line {i}\n"
        agent_state = {"loop": {"turns": i + 1}, "inference_aborts": 0}
        writer.capture(model.state, model.buffer, agent_state, turns=i + 1)
        await writer.settle()
        expected.append(model.snapshot({**agent_state, "workdir_diff": tree["diff"]}))
    await writer.drain()
    await model.client.aclose()
    return model, writer, written, expected


async def test_the_chain_restores_the_abort_snapshot_of_every_boundary(fake_sglang: FakeSGLang) -> None:
    store = Store()
    _, writer, written, expected = await _conversation(fake_sglang, 6, store)
    assert [w.turns for w in written] == [1, 2, 3, 4, 5, 6] and writer.failed == 0
    for w, snapshot in zip(written, expected):
        head = store.objects[w.ref]
        assert is_checkpoint(head) and not is_checkpoint(snapshot)
        restored, top = await restore_chain(head, store.fetch)
        _same(restored, Snapshot.from_bytes(snapshot))
        assert top.depth == w.segments and top.chain_bytes == w.chain_bytes
        assert w.tokens == len(restored.buffer.input_ids)


async def test_a_segment_holds_only_what_its_turn_added(fake_sglang: FakeSGLang) -> None:
    store = Store()
    _, _, written, expected = await _conversation(fake_sglang, 12, store)
    sizes = [len(store.objects[w.ref]) for w in written]
    # Turns add the same amount: the last segment is about the size of the second, while
    # the whole snapshot has grown about sixfold.
    assert sizes[-1] < 1.5 * sizes[1], sizes
    assert len(expected[-1]) > 4 * sizes[-1], (len(expected[-1]), sizes)
    assert written[-1].segments == 12


async def test_a_whole_segment_every_full_every(fake_sglang: FakeSGLang) -> None:
    store = Store()
    _, _, written, expected = await _conversation(fake_sglang, 7, store, full_every=3)
    assert [w.segments for w in written] == [1, 2, 3, 1, 2, 3, 1]
    restored, _ = await restore_chain(store.objects[written[-1].ref], store.fetch)
    _same(restored, Snapshot.from_bytes(expected[-1]))


async def test_a_lost_upload_leaves_no_hole(fake_sglang: FakeSGLang) -> None:
    store = Store(fail={3})
    _, writer, written, expected = await _conversation(fake_sglang, 5, store)
    assert writer.failed == 1 and [w.turns for w in written] == [1, 2, 4, 5]
    restored, _ = await restore_chain(store.objects[written[-1].ref], store.fetch)
    _same(restored, Snapshot.from_bytes(expected[-1]))


async def test_a_chain_missing_a_parent_or_out_of_order_is_refused(fake_sglang: FakeSGLang) -> None:
    store = Store()
    _, _, written, _ = await _conversation(fake_sglang, 3, store)
    head = store.objects[written[-1].ref]
    del store.objects[written[0].ref]

    async def fetch(sha: str, size: int) -> bytes:
        if sha not in store.objects:
            raise SnapshotError(f"parent {sha} is missing")
        return store.objects[sha]

    with pytest.raises(SnapshotError, match="missing"):
        await restore_chain(head, fetch)
    with pytest.raises(SnapshotError, match="cannot restore checkpoint"):
        await restore_chain(b"not a blob", store.fetch)
