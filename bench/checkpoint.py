"""Per-turn checkpoints: their cost on the runner's critical path, and their size.

A conversation is grown to 4k, 16k and 32k tokens with RLTokenModel on a canned server
(runner_overhead's), whose every answer takes GENERATE_SECONDS (a stand-in for the
/generate the checkpoint hides under). Each measured turn is: generate, the tool reply,
the step boundary (capture), and, before the next action, the wait for the checkpoint's
working-tree read (settle). The writer is the runner's own (agent_runner.pod.checkpoint)
with real parts: the working tree read by `git diff` against the base commit of a real
repository with a changing file, segments put into a real file:// result store.

Reported per size:

- visible cost: the median turn with checkpoints minus the median turn without
  (the baseline, measured in the same run on the same conversation), and the capture
  alone (the part that can never hide);
- bytes per checkpoint (median segment), against the whole snapshot at that point
  (what an abort writes) and the whole segment written every FULL_EVERY turns.

Run: ``python -m bench.checkpoint``; ``run()`` returns the numbers.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_runner.pod.checkpoint import FULL_EVERY, CheckpointWriter, Lengths, Written, capture, encode_segment
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams
from bench.runner_overhead import TOOLS, CannedClient, _reply_ids, observation
from swerollout.store import ObjectKind, Owner, open_store
from swerollout.tokenizers import load_tokenizer

TOKENIZER = "qwen-2.5"
SIZES = (4_000, 16_000, 32_000)
MEASURED_TURNS = 9
GENERATE_SECONDS = 0.25
"""Far below a real turn of a 32B model (seconds): the checkpoint has less to hide under."""
OWNER = Owner(namespace="bench", uid="checkpoint-bench")


class SlowClient(CannedClient):
    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(GENERATE_SECONDS)
        return await super().generate(*args, **kwargs)


def _repo(root: Path) -> tuple[Path, str]:
    repo = root / "repo"
    repo.mkdir(parents=True)
    for i in range(50):
        (repo / f"module_{i}.py").write_text("".join(f"def f{j}(x):\n    return x + {j}\n" for j in range(40)))
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "base"]):
        subprocess.run(cmd, cwd=repo, check=True, env={**env, "PATH": "/usr/bin:/bin"})
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    return repo, base.stdout.strip()


async def _measure(size: int, root: Path) -> dict[str, float]:
    tokenizer = load_tokenizer(TOKENIZER)
    store = open_store(f"file://{root / 'store'}")
    repo, base = _repo(root / f"r{size}")
    model = RLTokenModel(
        tokenizer,
        SlowClient(_reply_ids(tokenizer)),  # type: ignore[arg-type]
        sampling=SamplingParams(max_new_tokens=1024),
        max_context_tokens=1_000_000,
        run_uid="bench",
        tools=TOOLS,
    )
    model.add_messages([{"role": "system", "content": "You are careful."}, {"role": "user", "content": "Fix it."}])
    index = root / f"index-{size}"

    async def diff() -> str:
        command = (
            f"cp .git/index {index} && GIT_INDEX_FILE={index} git add -A >/dev/null 2>&1 && "
            f"GIT_INDEX_FILE={index} git diff --cached --binary {base}"
        )
        proc = await asyncio.create_subprocess_shell(command, cwd=repo, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        return out.decode()

    sizes: list[int] = []

    async def upload(blob: bytes) -> str:
        sizes.append(len(blob))
        return (await store.put(OWNER, ObjectKind.CHECKPOINT, blob)).ref

    async def on_written(_: Written) -> None:
        pass

    writer = CheckpointWriter(diff=diff, upload=upload, on_written=on_written)
    step = 0

    async def turn(checkpointed: bool) -> None:
        # In the loop's order: the model call (the last boundary's checkpoint is written
        # meanwhile), the wait for its tree read before the action, the action (a file of
        # the repository changes), the tool reply, the boundary.
        nonlocal step
        await model.generate()
        step += 1
        if checkpointed:
            await writer.settle()
        (repo / f"module_{step % 50}.py").write_text(f"# edited at turn {step}\n" + observation(step))
        model.add_messages([{"role": "tool", "tool_call_id": f"call_{step}_0", "content": observation(step)}])
        if checkpointed:
            writer.capture(model.state, model.buffer, {"loop": {"turns": step}}, turns=step)

    while len(model.buffer) < size:
        await turn(checkpointed=True)
    await writer.drain()
    context = len(model.buffer)
    baseline: list[float] = []
    ours: list[float] = []
    # Baseline turns first, then one checkpointed turn that catches the chain up (its
    # segment covers them), then the measured checkpointed turns: one turn per segment.
    for _ in range(MEASURED_TURNS):
        start = time.perf_counter()
        await turn(checkpointed=False)
        baseline.append(time.perf_counter() - start)
    await turn(checkpointed=True)
    for _ in range(MEASURED_TURNS):
        start = time.perf_counter()
        await turn(checkpointed=True)
        ours.append(time.perf_counter() - start)
    await writer.drain()
    measured = sizes[-MEASURED_TURNS:]
    whole = len(encode_segment(capture(model.state, model.buffer, {}, Lengths(), turns=step), None, ""))
    snapshot = len(model.snapshot({"loop": {"turns": step}}))
    await store.aclose()
    return {
        "context_tokens": float(context),
        "turn_ms": statistics.median(baseline) * 1e3,
        "visible_ms": (statistics.median(ours) - statistics.median(baseline)) * 1e3,
        "capture_ms": statistics.median(writer.capture_seconds[-MEASURED_TURNS:]) * 1e3,
        "segment_bytes": float(statistics.median(measured)),
        "whole_segment_bytes": float(whole),
        "snapshot_bytes": float(snapshot),
        "failed": float(writer.failed),
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="swerollout-ckpt-bench-") as tmp:
        per_size = {size: asyncio.run(_measure(size, Path(tmp))) for size in SIZES}
    return {"generate_seconds": GENERATE_SECONDS, "full_every": FULL_EVERY, "per_size": per_size}


def report(result: dict[str, Any]) -> str:
    lines = [
        f"per-turn checkpoints (generation {result['generate_seconds'] * 1000:.0f} ms a turn, real git diff and "
        f"file store; a whole segment every {result['full_every']} turns):"
    ]
    for n in result["per_size"].values():
        lines.append(
            f"  {n['context_tokens']:>6.0f} ctx tokens: visible {n['visible_ms']:+.2f} ms/turn of a "
            f"{n['turn_ms']:.0f} ms turn (capture {n['capture_ms']:.2f} ms); segment {n['segment_bytes']:.0f} B "
            f"= {n['segment_bytes'] / n['snapshot_bytes']:.3f}x the whole snapshot ({n['snapshot_bytes']:.0f} B); "
            f"whole segment {n['whole_segment_bytes']:.0f} B"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
