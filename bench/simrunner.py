"""Simulated runners: what agent_runner does on the wire, for pods that run no container.

`SimulatedRunners` watches the rollout pods of one namespace. When KWOK reports a pod
Running and Ready, it starts a runner for it from the pod's own runner environment
(`RunnerEnv`, as the runner container reads it), speaking to the operator through the
runner's own `IngestClient` (its retry rule and idempotency keys), in the order the
real runner's `agent_runner/pod/session.py` does:

- rollout role: long-poll for the assignment; on `run` or `resume` (downloading the
  snapshot first) report `started`, hold a second long poll open that watches for the
  abort, play the turns with the real progress rule (a report at most once a second,
  and a final one); the generation after the first half of the turns stays in flight
  until the abort arrives (an RL step is aborted mid-generation), which uploads a
  snapshot and reports `aborted`; a resumed run plays the rest of its turns, uploads
  its trajectory and patch, and reports `finished`;
- eval role: long-poll until `eval`, download the patch, upload a report, and report
  `evaluated` with the reward;
- both exit on `stop`; a pod deleted under its runner ends it, as a kubelet would.

The snapshot and the trajectory are encoded by the real codecs (agent_runner.policy.rl_model,
swerollout.wire.trajectory) from a conversation shape drawn per rollout (seeded by its
name): a prompt of 800-1,500 tokens and 10-30 turns of 20-120 sampled and 30-150
environment tokens (about 4,000 tokens in all), so their sizes are a real run's of that shape.

The ingest tokens are derived from the operator's key (the bench started the operator),
as the Secret the operator wrote holds them; reading 20,000 Secrets back would load the
API server with the kubelet's work, which is not what the bench measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from agent_runner.policy.rl_model import ModelState, Snapshot, TurnRecord
from agent_runner.policy.tokens import TokenBuffer
from swerollout.api import v1alpha1 as api
from swerollout.kube import PODS, ApiError, AsyncKubeClient, TransportError
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import IngestClient
from swerollout.wire.runner_env import RunnerEnv, RunnerRole
from swerollout.wire.trajectory import Trajectory

RUNNER_CONTAINER = "runner"
WORDS = (
    "def return self import from class assert test value error none true false list dict for in if else "
    "raise with open path file line print result config module function args kwargs index key item data"
).split()
VERSION = "bench-v1"


@dataclass(frozen=True)
class Shape:
    """The conversation of one rollout, drawn from its name."""

    prompt_tokens: int
    sampled: tuple[int, ...]
    """Sampled tokens of each turn."""
    environment: tuple[int, ...]
    """Environment (observation + template) tokens after each turn."""

    @classmethod
    def of(cls, name: str) -> Shape:
        rng = random.Random(name)
        turns = rng.randint(10, 30)
        return cls(
            prompt_tokens=rng.randint(800, 1500),
            sampled=tuple(rng.randint(20, 120) for _ in range(turns)),
            environment=tuple(rng.randint(30, 150) for _ in range(turns)),
        )

    @property
    def turns(self) -> int:
        return len(self.sampled)

    @property
    def abort_after(self) -> int:
        """Turns done when the abort arrives: the first half."""
        return self.turns // 2

    def tokens_after(self, turns: int) -> int:
        return self.prompt_tokens + sum(self.sampled[:turns]) + sum(self.environment[:turns])


_STREAM = [random.Random("simrunner-words").choice(WORDS) for _ in range(1 << 16)]
"""A fixed stream of words; a message is a slice of it at a drawn offset (drawing every
word per rollout cost the bench more CPU than the operator spent on the rollout)."""


def _text(rng: random.Random, tokens: int) -> str:
    start = rng.randrange(len(_STREAM) - tokens) if tokens < len(_STREAM) else 0
    return " ".join(_STREAM[start : start + tokens])


def _ids(rng: np.random.Generator, n: int) -> list[int]:
    return [int(i) for i in rng.integers(0, 150_000, n)]


def _conversation(name: str, shape: Shape, turns: int) -> tuple[TokenBuffer, list[dict[str, Any]], list[TurnRecord]]:
    """The token list and messages of `turns` turns of `shape`, as RLTokenModel holds them."""
    rng = random.Random(f"{name}/tokens")
    draw = np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))
    buffer = TokenBuffer()
    buffer.set_prompt(_ids(draw, shape.prompt_tokens))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _text(rng, 300)},
        {"role": "user", "content": _text(rng, shape.prompt_tokens - 300)},
    ]
    records = []
    for t in range(turns):
        n = shape.sampled[t]
        buffer.append_sampled(_ids(draw, n), [float(x) for x in draw.uniform(-3.0, 0.0, n)], VERSION)
        buffer.append_context(_ids(draw, shape.environment[t]))
        messages.append({"role": "assistant", "content": _text(rng, n)})
        messages.append({"role": "user", "content": _text(rng, shape.environment[t])})
        records.append(
            TurnRecord(rid=f"{name}-t{t}", finish="stop", sampled=n, kept=True, kept_tokens=n, weight_version=VERSION)
        )
    return buffer, messages, records


def snapshot_blob(name: str, shape: Shape, turns: int) -> bytes:
    buffer, messages, records = _conversation(name, shape, turns)
    state = ModelState(
        messages=messages, turn_counter=turns + 1, sampled_total=sum(shape.sampled[:turns]), turns=records
    )
    return Snapshot(
        state=state, agent_state={"loop": {"turns": turns}, "workdir_diff": _patch(name)}, buffer=buffer
    ).to_bytes()


def snapshot_turns(blob: bytes) -> int:
    return int(Snapshot.from_bytes(blob).agent_state["loop"]["turns"])


def trajectory_blob(name: str, uid: str, shape: Shape) -> tuple[bytes, Trajectory]:
    buffer, messages, _ = _conversation(name, shape, shape.turns)
    p = buffer.prompt_length
    trajectory = Trajectory(
        run_uid=uid,
        prompt_ids=buffer.input_ids[:p],
        response_ids=buffer.input_ids[p:],
        loss_mask=list(buffer.loss_mask[p:]),
        logprobs=buffer.logprobs[p:],
        weight_versions=[buffer.versions[i] for i in buffer.version_index[p:]],
        messages=messages,
        exit_status="submitted",
        submission=_patch(name),
        turns=shape.turns,
    )
    return trajectory.to_bytes(), trajectory


def _patch(name: str) -> str:
    rng = random.Random(f"{name}/patch")
    lines = "".join(f"-    {_text(rng, 8)}\n+    {_text(rng, 9)}\n" for _ in range(rng.randint(5, 40)))
    return f"diff --git a/src/module.py b/src/module.py\n--- a/src/module.py\n+++ b/src/module.py\n@@ -10,4 +10,4 @@\n{lines}"


class RetryCount(logging.Handler):
    """The runners' retried requests (IngestClient logs each), by problem."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.problems: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        problem = str(args[2]) if isinstance(args, tuple) and len(args) > 2 else record.getMessage()
        self.problems[problem.split(":")[0]] += 1


@dataclass
class Tally:
    """What the runners saw and when (monotonic seconds), by rollout name."""

    started: dict[str, float] = field(default_factory=dict)
    """First `started` report of the run."""
    parked: set[str] = field(default_factory=set)
    """Runs holding their first-half generation, waiting for the abort."""
    abort: dict[str, float] = field(default_factory=dict)
    resume: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    evaluated: dict[str, float] = field(default_factory=dict)
    snapshot_bytes: list[int] = field(default_factory=list)
    trajectory_bytes: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    applied: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(rollout, event kind) -> answers that said the event was applied (not a duplicate):
    more than one means some replica applied a report twice."""


class SimulatedRunners:
    def __init__(
        self,
        kube: AsyncKubeClient,
        namespace: str,
        key_file: Path,
        *,
        turn_seconds: float = 0.02,
        hold_seconds: float = 3600.0,
        eval_seconds: float = 0.1,
    ) -> None:
        from swerollout_operator.tokens import TokenKey  # the operator's own derivation

        self.kube = kube
        self.namespace = namespace
        self.key = TokenKey.from_file(key_file)
        self.turn_seconds = turn_seconds
        self.hold_seconds = hold_seconds
        """How long the first half's last generation stays in flight without an abort."""
        self.eval_seconds = eval_seconds
        self.tally = Tally()
        self.retries = RetryCount()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        """pod uid -> its runner."""
        self.pod_uids: dict[str, set[str]] = {}
        """pod name -> the uids seen under it: more than one is a pod made twice."""
        self._watch: asyncio.Task[None] | None = None

    def start(self) -> None:
        logging.getLogger("swerollout.wire.ingest").addHandler(self.retries)
        self._watch = asyncio.create_task(self._pods())

    async def stop(self) -> None:
        logging.getLogger("swerollout.wire.ingest").removeHandler(self.retries)
        tasks = [t for t in (self._watch, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def running(self) -> int:
        return sum(1 for t in self._tasks.values() if not t.done())

    # -- the kubelet's side: a runner per Running pod -----------------------------------

    async def _pods(self) -> None:
        selector = f"{api.LABEL_ROLLOUT}"
        version: str | None = None
        while True:
            try:
                if version is None:
                    listing = await self.kube.list(PODS, self.namespace, label_selector=selector)
                    for pod in listing["items"]:
                        self._saw(pod, deleted=False)
                    version = listing["metadata"]["resourceVersion"]
                async for event in self.kube.watch(
                    PODS, self.namespace, label_selector=selector, resource_version=version, timeout_seconds=300
                ):
                    if event.type == "BOOKMARK":
                        version = event.object["metadata"]["resourceVersion"]
                        continue
                    version = event.object["metadata"].get("resourceVersion", version)
                    self._saw(event.object, deleted=event.type == "DELETED")
            except asyncio.CancelledError:
                raise
            except (ApiError, TransportError):
                version = None
                await asyncio.sleep(1)

    def _saw(self, pod: dict[str, Any], *, deleted: bool) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        self.pod_uids.setdefault(meta["name"], set()).add(uid)
        if deleted or meta.get("deletionTimestamp"):
            task = self._tasks.get(uid)
            if task is not None and not task.done():
                task.cancel()  # the kubelet kills the containers
            return
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if uid in self._tasks or status.get("phase") != "Running" or not ready:
            return
        container = next(c for c in pod["spec"]["containers"] if c["name"] == RUNNER_CONTAINER)
        env = RunnerEnv.from_environ({e["name"]: e["value"] for e in container.get("env") or [] if "value" in e})
        self._tasks[uid] = asyncio.create_task(self._runner(env, len(self._tasks)))

    # -- one runner -------------------------------------------------------------------

    async def _runner(self, env: RunnerEnv, k: int) -> None:
        from swerollout_operator.tokens import TokenKind

        token = self.key.derive(TokenKind.INGEST, env.namespace, env.name, env.uid)
        # Each runner dials from a loopback address of its own, as each pod has its own IP:
        # 20,000 runners with two connections each would otherwise need more ephemeral
        # ports towards the one operator address than the kernel hands out (about 28,000).
        transport = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=2), local_address=f"127.2.{k // 250 % 250}.{k % 250 + 1}"
        )
        ingest = IngestClient(
            env.ingest_url,
            namespace=env.namespace,
            name=env.name,
            uid=env.uid,
            token=token,
            role=env.role.value,
            attempt=env.attempt,
            transport=transport,
        )
        try:
            after: str | None = None
            while True:
                assignment = await ingest.assignment(after=after, wait=30)
                after = assignment.id
                match assignment:
                    case wire.Stop():
                        return
                    case wire.Run() | wire.Resume() if env.role is RunnerRole.ROLLOUT:
                        if isinstance(assignment, wire.Resume):
                            self.tally.resume.setdefault(env.name, time.monotonic())
                        await self._execute(ingest, env, assignment)
                    case wire.Eval() if env.role is RunnerRole.EVAL:
                        await self._evaluate(ingest, env, assignment)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - counted and shown: a runner that gave up is a finding
            self.tally.errors.append(f"{env.name} ({env.role.value}): {type(exc).__name__}: {exc}")
        finally:
            await transport.aclose()

    async def _execute(self, ingest: IngestClient, env: RunnerEnv, assignment: wire.Run | wire.Resume) -> None:
        shape = Shape.of(env.name)
        done = 0
        resumed = isinstance(assignment, wire.Resume)
        if isinstance(assignment, wire.Resume):
            done = snapshot_turns(await ingest.download(assignment.snapshot))
        await self._report(ingest, env.name, wire.Started(assignment_id=assignment.id))
        self.tally.started.setdefault(env.name, time.monotonic())
        aborted = asyncio.Event()
        watcher = asyncio.create_task(self._watch_for_abort(ingest, env.name, assignment.id, aborted))
        progress = _Progress(ingest, shape, self.turn_seconds)
        try:
            first_half = not resumed
            end = shape.abort_after if first_half else shape.turns
            for turn in range(done + 1, end + 1):
                await asyncio.sleep(self.turn_seconds)
                await progress.step(turn)
                if aborted.is_set():
                    break
            done = progress.turns or done
            if first_half and not aborted.is_set():
                # The next generation is in flight until the step's abort (or hold_seconds).
                self.tally.parked.add(env.name)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(aborted.wait(), self.hold_seconds)
                self.tally.parked.discard(env.name)
        finally:
            watcher.cancel()
        await progress.flush(final=True)
        if aborted.is_set():
            blob = snapshot_blob(env.name, shape, done)
            ref = await ingest.upload(wire.ObjectKind.SNAPSHOT, blob)
            self.tally.snapshot_bytes.append(len(blob))
            await self._report(
                ingest,
                env.name,
                wire.Aborted(
                    assignment_id=assignment.id,
                    reason="Suspended",
                    snapshot=ref,
                    turns=done,
                    context_tokens=shape.tokens_after(done),
                    weight_version=VERSION,
                ),
            )
            return
        if done < shape.turns:
            # Held past hold_seconds with no abort: play the rest and finish.
            for turn in range(done + 1, shape.turns + 1):
                await asyncio.sleep(self.turn_seconds)
                await progress.step(turn)
            await progress.flush(final=True)
        blob, trajectory = trajectory_blob(env.name, env.uid, shape)
        trajectory_ref = await ingest.upload(wire.ObjectKind.TRAJECTORY, blob)
        patch_ref = await ingest.upload(wire.ObjectKind.PATCH, trajectory.submission.encode())
        self.tally.trajectory_bytes.append(len(blob))
        self.tally.tokens.append(len(trajectory.prompt_ids) + len(trajectory.response_ids))
        await self._report(
            ingest,
            env.name,
            wire.Finished(
                assignment_id=assignment.id,
                exit_status="submitted",
                trajectory=trajectory_ref,
                patch=patch_ref,
                turns=shape.turns,
                prompt_tokens=len(trajectory.prompt_ids),
                response_tokens=len(trajectory.response_ids),
                sampled_tokens=trajectory.sampled_tokens,
                context_tokens=shape.tokens_after(shape.turns),
            ),
        )
        self.tally.finished.setdefault(env.name, time.monotonic())

    async def _report(self, ingest: IngestClient, name: str, event: wire.RunnerEvent) -> wire.Ack:
        ack = await ingest.event(event)
        if not ack.duplicate:
            self.tally.applied[(name, event.kind.value)] += 1
        return ack

    async def _watch_for_abort(self, ingest: IngestClient, name: str, after: str, aborted: asyncio.Event) -> None:
        while True:
            update = await ingest.assignment(after=after, wait=30)
            after = update.id
            if update.kind in (wire.AssignmentKind.ABORT, wire.AssignmentKind.STOP):
                if update.kind == wire.AssignmentKind.ABORT:
                    self.tally.abort.setdefault(name, time.monotonic())
                aborted.set()
                return

    async def _evaluate(self, ingest: IngestClient, env: RunnerEnv, assignment: wire.Eval) -> None:
        patch = (await ingest.download(assignment.patch)).decode()
        await asyncio.sleep(self.eval_seconds)
        # Half the patches resolve the task, by a hash of the patch (stable across runs).
        resolved = bool(patch) and hashlib.sha256(patch.encode()).digest()[0] < 128
        reward = 1.0 if resolved else 0.0
        report = {
            "instance_id": env.name,
            "resolved": resolved,
            "reward": reward,
            "message": "simulated grading",
            "patch_applied": bool(patch),
        }
        report_ref = await ingest.upload(wire.ObjectKind.REPORT, json.dumps(report).encode())
        await self._report(
            ingest,
            env.name,
            wire.Evaluated(
                assignment_id=assignment.id,
                report=report_ref,
                reward=wire.RewardReport(
                    resolved=resolved,
                    reward=reward,
                    fail_to_pass_passed=int(resolved),
                    fail_to_pass_total=1,
                    message="simulated grading",
                ),
            ),
        )
        self.tally.evaluated.setdefault(env.name, time.monotonic())


class _Progress:
    """The runner's progress rule: a report at most once a second of the run, and a final
    one. The run's time is the turns' own (`turn_seconds` each), not the wall clock: on a
    loaded machine a slow answer to one report would otherwise make every later turn
    "a second later" and send a report per turn, which a run of that many turns in that
    time never does."""

    def __init__(self, ingest: IngestClient, shape: Shape, turn_seconds: float) -> None:
        self.ingest = ingest
        self.shape = shape
        self.turn_seconds = turn_seconds
        self.turns = 0
        self.pending = False
        self.clock = 0.0
        self.last_sent: float | None = None

    async def step(self, turn: int) -> None:
        self.turns = turn
        self.pending = True
        self.clock += self.turn_seconds
        if self.last_sent is None or self.clock - self.last_sent >= 1.0:
            await self.flush()

    async def flush(self, *, final: bool = False) -> None:
        if not self.pending and not (final and self.turns):
            return
        self.pending = False
        self.last_sent = self.clock
        report = wire.ProgressReport(
            turns=self.turns,
            context_tokens=self.shape.tokens_after(self.turns),
            generated_tokens=sum(self.shape.sampled[: self.turns]),
        )
        with contextlib.suppress(Exception):  # best effort, as the runner's
            await self.ingest.progress(report)
