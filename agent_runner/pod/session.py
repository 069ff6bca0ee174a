"""The runner process: poll the operator for work, do it, report it.

One runner lives in each rollout pod (role `rollout`) or eval pod (role `eval`).
It long-polls the ingest API for its assignment and acts once per assignment id:

- run / resume: drive the agent loop against the sandbox next door; while it runs,
  keep polling, and on an `abort` assignment abort the in-flight generation by
  its exact rid. An abort (ours, or the inference server's own) ends in a snapshot
  upload and an `aborted` event; the sandbox stays as it is for the resume.
- resume with `replay`: the pod is new, so first restore the recorded working
  tree (the diff captured at the abort) in this sandbox, then continue.
- eval: apply the patch in this pod's fresh sandbox, grade, report the reward.
- stop: exit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shlex
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent_runner.agent.config import AgentConfig, AgentConfigError
from agent_runner.agent.loop import AgentLoop, LoopResult, LoopState, StepInfo, TaskInfo
from agent_runner.eval.harness import EvalRequest, evaluate
from agent_runner.policy.errors import ModelError, ModelUnavailableError
from agent_runner.policy.model import FinishReason, Model, ModelTurn
from agent_runner.sandbox import Sandbox, SandboxError
from swerollout.api import v1alpha1 as api
from swerollout.api.base import one_line
from swerollout.backoff import Backoff, Schedule
from swerollout.wire import ingest as wire
from swerollout.wire.ingest import IngestClient
from swerollout.wire.runner_env import RunnerEnv, RunnerEnvError, RunnerRole

from . import eval_timeline, kinds, startup, turn_checkpoints
from .checkpoint import CheckpointWriter, Head
from .eval_timeline import prefetch_grader
from .log_tail import LogTail
from .startup import FIRST_GENERATE, GO, TokenizerPrefetch
from .timeline import Timeline

log = logging.getLogger(__name__)


# An abort we did not ask for comes from the inference side (a trainer's
# pause_generation / abort_request around a weight update). It is not a suspension:
# the turn is re-sampled once the server accepts requests again (SGLang holds new
# requests while paused, so the re-sent request simply waits). A suspension of ours
# can race it (the trainer aborts the server first, then marks the rollouts), so
# before re-sampling we give our own abort this long to arrive.
OWN_ABORT_GRACE_SECONDS = 2.0
# How long a run waits out an inference server that is down, failing (5xx, 429) or
# aborting its requests, counted from the first failure of an unbroken series, before
# it ends as exit_api: spec.inference.outageBudgetSeconds (this is its default).
INFERENCE_OUTAGE_BUDGET_SECONDS = 600.0
# The pauses between re-sends while the server is down (the client's own quick
# retries come first); the budget bounds them.
OUTAGE_BACKOFF = Backoff(first_seconds=1.0, max_seconds=15.0)
# Re-sending an abort that failed or did not land; past the budget the request is cancelled locally.
ABORT_BACKOFF = Backoff(first_seconds=0.5, max_seconds=2.0, budget_seconds=30.0)
# Connecting to the sandbox container next door, which may start after the runner. Short
# pauses (0.2 s on average once capped): swerex answers a few seconds after the pod
# starts, and each pause is on the path of the rollout's start.
SANDBOX_CONNECT_BACKOFF = Backoff(first_seconds=0.1, max_seconds=0.4, budget_seconds=300.0)
# At SIGTERM the in-flight request's abort gets this long; the pod's grace period is 30 s
# by default and the checkpoint being written must land in it too.
ABANDON_ABORT_SECONDS = 5.0
# The exit status of a runner ended by SIGTERM (128 + 15, as a shell reports it).
EXIT_TERMINATED = 128 + signal.SIGTERM


class _AbortNotLanded(Exception):
    """An abort could not be sent, or the request went on after it."""


class AbortableModel:
    """Wraps a Model so that an abort lands whether or not a request is in flight.

    A request in flight is aborted at the server by its exact rid (SGLang drops any
    other rid); a request not yet sent, or waiting to retry, is never sent. Either way
    the loop sees a turn with finish_reason ABORT. The abort is sent again only on a
    real failure: it could not be delivered, or it was delivered and the request did
    not end within a second (it raced the request's arrival, when the rid was not
    live yet). While the server is paused (``GET /ready`` 503) no rid is sent: an
    exact-rid abort of a request held at SGLang's pause gate is lost, so the client
    closes the request and the turn ends as aborted at once (SGLangClient.
    abort_in_flight); after 30 failed tries the local request is cancelled. An abort
    the runner did not request is ridden out here (see OWN_ABORT_GRACE_SECONDS): the
    loop never sees it, and `inference_aborts` counts it. A server that cannot be
    reached or keeps failing after the client's quick retries (ModelUnavailableError:
    connection errors, 5xx, 429) is waited out the same way, with backoff: the turn
    is sent again once it answers. Both share one budget per unbroken series.
    """

    def __init__(
        self,
        inner: Model,
        abort_remote: Callable[[], Awaitable[object]] | None,
        *,
        own_abort_grace: float = OWN_ABORT_GRACE_SECONDS,
        outage_budget: float = INFERENCE_OUTAGE_BUDGET_SECONDS,
    ) -> None:
        self.inner = inner
        self._abort_remote = abort_remote
        self.requested = asyncio.Event()
        self._task: asyncio.Task[ModelTurn] | None = None
        self._own_abort_grace = own_abort_grace
        self._outage_budget = outage_budget
        self.inference_aborts = 0
        """Inference-side aborts ridden out (re-sampled) in this run."""
        self.outage_retries = 0
        """Turns re-sent after the server was unreachable or failing, in this run."""
        self.generation_seconds: list[float] = []
        """Wall time of each generate call, drained by the progress reporter."""
        self.on_send: Callable[[], None] | None = None
        """Called as each request goes out (the startup timeline notes the first)."""
        self.closing = False
        """The process is going (abandon): no request goes out any more."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.inner.messages

    @property
    def context_tokens(self) -> int:
        return self.inner.context_tokens

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        self.inner.add_messages(messages)

    async def generate(self, *, max_new_tokens: int | None = None) -> ModelTurn:
        # A Schedule, not a retry loop: the budget counts from the first failure (not from
        # the first request, which may generate for minutes), a wait ends early on our
        # own suspension, and inference-side aborts share the budget without waiting.
        outage: Schedule | None = None
        while True:
            try:
                turn = await self._generate_once(max_new_tokens)
            except ModelUnavailableError as exc:
                if self.requested.is_set():
                    return ModelTurn(text="", finish_reason=FinishReason.ABORT)
                outage = outage or OUTAGE_BACKOFF.model_copy(update={"budget_seconds": self._outage_budget}).start()
                delay = outage.next_delay()
                if delay is None:
                    raise ModelUnavailableError(
                        f"the inference server stayed unavailable for {outage.elapsed:.0f} s, past "
                        f"spec.inference.outageBudgetSeconds ({self._outage_budget:.0f} s); last error: {exc}"
                    ) from exc
                self.outage_retries += 1
                log.warning("inference server unavailable (%s); sending the turn again in %.1f s", exc, delay)
                if await self._suspended_within(delay):
                    return ModelTurn(text="", finish_reason=FinishReason.ABORT)
                continue
            if turn.finish_reason != FinishReason.ABORT or self.requested.is_set():
                return turn
            # Not ours: wait briefly for a suspension that may be on its way.
            if await self._suspended_within(self._own_abort_grace):
                return turn
            outage = outage or OUTAGE_BACKOFF.model_copy(update={"budget_seconds": self._outage_budget}).start()
            if outage.elapsed > self._outage_budget:
                raise ModelError(
                    f"the inference server kept aborting this run's requests for {outage.elapsed:.0f} s, past "
                    f"spec.inference.outageBudgetSeconds ({self._outage_budget:.0f} s)"
                )
            self.inference_aborts += 1
            log.info("inference-side abort (%d so far): re-sampling the turn", self.inference_aborts)

    async def _suspended_within(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as our own abort is requested."""
        try:
            await asyncio.wait_for(self.requested.wait(), timeout=seconds)
            return True
        except TimeoutError:
            return False

    async def _generate_once(self, max_new_tokens: int | None) -> ModelTurn:
        if self.requested.is_set():
            return ModelTurn(text="", finish_reason=FinishReason.ABORT)
        if self.closing:
            # The cancellation that ends this process is on its way; until it lands, the
            # loop (which took the abandoned request's abort for the server's) waits here.
            await asyncio.Event().wait()
        if self.on_send is not None:
            self.on_send()
        self._task = asyncio.create_task(self.inner.generate(max_new_tokens=max_new_tokens))
        started = time.monotonic()
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled() and self.requested.is_set():
                return ModelTurn(text="", finish_reason=FinishReason.ABORT)
            raise
        finally:
            self._task = None
            self.generation_seconds.append(time.monotonic() - started)

    async def request_abort(self) -> None:
        self.requested.set()
        task = self._task
        if task is None:
            return
        abort_remote = self._abort_remote
        if abort_remote is not None:
            try:
                async for attempt in ABORT_BACKOFF.retrying(retryable=lambda exc: isinstance(exc, _AbortNotLanded)):
                    with attempt:
                        await self._abort_once(task, abort_remote)
            except _AbortNotLanded:
                pass  # spent: cancelling below is the fallback
        if not task.done():
            task.cancel()

    async def abandon(self) -> None:
        """This process is going (SIGTERM: the pod is deleted, evicted or drained): end the
        in-flight request on the server at once, so the engine stops sampling for a pod
        that is gone, and send no other. One bounded try and no report: the operator
        replays the run from its last checkpoint, and SGLang ends a request whose
        connection closes anyway, only later."""
        self.closing = True
        task, abort_remote = self._task, self._abort_remote
        if task is None or task.done() or abort_remote is None:
            return
        try:
            await asyncio.wait_for(abort_remote(), timeout=ABANDON_ABORT_SECONDS)
        except Exception as exc:  # noqa: BLE001 - exiting either way
            log.warning("could not abort the in-flight request at SIGTERM: %s", exc)

    async def _abort_once(self, task: asyncio.Task[ModelTurn], abort_remote: Callable[[], Awaitable[object]]) -> None:
        """Send the abort once; _AbortNotLanded when it could not be sent, or the request
        did not end within a second of it (it raced the request's arrival)."""
        if task.done():
            return
        try:
            await abort_remote()
        except Exception as exc:  # noqa: BLE001 - keep trying; cancelling is the fallback
            log.warning("abort request failed: %s", exc)
            raise _AbortNotLanded(str(exc)) from exc
        try:
            # A delivered abort ends the request at once, unless it raced the request's arrival.
            await asyncio.wait_for(asyncio.shield(task), timeout=1.0)
        except (TimeoutError, Exception):  # noqa: BLE001
            if not task.done():
                raise _AbortNotLanded("the request did not end within 1 s of its abort") from None


class Runner:
    def __init__(
        self,
        env: RunnerEnv,
        log_tail: LogTail | None = None,
        timeline: Timeline | None = None,
        prefetch: TokenizerPrefetch | None = None,
    ) -> None:
        self.env = env
        self.log_tail = log_tail
        """This process's log, uploaded with each final report (None: not kept)."""
        self.timeline = timeline or startup.new_timeline()
        self.prefetch = prefetch or TokenizerPrefetch(None, self.timeline)
        self.ingest = IngestClient(
            env.ingest_url,
            namespace=env.namespace,
            name=env.name,
            uid=env.uid,
            token=env.read_ingest_token(),
            role=env.role.value,
            attempt=env.attempt,
        )
        self.swerex_token = env.read_swerex_token()
        self.sandbox: Sandbox | None = None
        self._prepared: _Run | None = None
        """The run a `prepare` set up, held for its go."""
        self.eval_timeline = eval_timeline.new_timeline()
        self._active: AbortableModel | None = None
        """The model of the run in progress (what a SIGTERM abandons)."""
        self._terminating: asyncio.Task[None] | None = None

    def _on_sigterm(self, main: asyncio.Task[int]) -> None:
        # The runner is PID 1 of its container, where SIGTERM has no default action: without
        # this it would keep sampling through the pod's whole grace period.
        if self._terminating is not None:
            return
        log.info("SIGTERM: the pod is going; ending the in-flight request and exiting")
        self._terminating = asyncio.create_task(self._terminate(main))

    async def _terminate(self, main: asyncio.Task[int]) -> None:
        if self._active is not None:
            await self._active.abandon()
        main.cancel()

    async def serve(self) -> int:
        main = asyncio.current_task()
        assert main is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self._on_sigterm, main)
        # The first assignment is asked for while swerex starts: neither waits for the other.
        connecting = asyncio.create_task(self._connect_sandbox())
        if self.env.role is RunnerRole.EVAL:
            prefetch_grader(self.eval_timeline)
        try:
            after: str | None = None
            while True:
                assignment = await self.ingest.assignment(after=after, wait=30)
                self.timeline.mark("assignment")
                if self.sandbox is None:
                    self.sandbox = await connecting
                    self.eval_timeline.mark("ready")
                after = assignment.id
                rollout = self.env.role is RunnerRole.ROLLOUT
                match assignment:
                    case wire.Stop():
                        log.info("assignment stop: exiting")
                        return 0
                    case wire.Prepare() if rollout:
                        await self._prepare(assignment)
                    case wire.Run() | wire.Resume() if rollout:
                        await self._execute(assignment)
                    case wire.Eval() if self.env.role is RunnerRole.EVAL:
                        await self._evaluate(assignment)
        except asyncio.CancelledError:
            if self._terminating is None:
                raise
            return EXIT_TERMINATED
        finally:
            if not connecting.done():
                connecting.cancel()
            if self.sandbox is not None:
                await self.sandbox.close()
            await self.ingest.aclose()

    async def _log_ref(self) -> wire.StoredObjectRef | None:
        """Upload the log so far (best effort: a report never fails for want of its log)."""
        if self.log_tail is None:
            return None
        try:
            return await self.ingest.upload(wire.ObjectKind.LOG, self.log_tail.value())
        except Exception as exc:  # noqa: BLE001
            log.warning("could not upload the runner log: %s", exc)
            return None

    async def _connect_sandbox(self) -> Sandbox:
        # Any failure: the sandbox container may still be starting.
        try:
            async for attempt in SANDBOX_CONNECT_BACKOFF.retrying(retryable=lambda exc: True):
                with attempt:
                    sandbox = await Sandbox.connect(self.env.sandbox_url(), self.swerex_token, timeout=30.0)
                    self.timeline.mark("swerex")
                    return sandbox
        except Exception as exc:  # noqa: BLE001 - spent: the runner cannot work without it
            raise SystemExit(f"agent_runner: sandbox at {self.env.sandbox_url()} unreachable: {exc}") from exc
        raise AssertionError("unreachable: the retry loop returns or raises")

    # -- run / resume ----------------------------------------------------------------

    def _model(
        self, spec: api.SWERolloutSpec, config: AgentConfig, snapshot: bytes | None
    ) -> tuple[kinds.KindRun, dict[str, Any]]:
        return kinds.build(spec, config, snapshot, keys=self.env.read_inference_keys(), routing_key=self.env.uid)

    async def _setup(self, assignment: wire.Working, *, warm: bool = False) -> _Run | None:
        """Everything a run or resume needs before its first model call; None when the
        setup failed (reported). `warm` (a prepare): an inference server that does not
        answer yet is asked for its limits at the go instead (it may be asleep while the
        trainer trains)."""
        assert self.sandbox is not None
        try:
            # The operator validated the spec with the same model; a runner of another
            # version may still disagree, and that must end the rollout with the reason.
            spec = api.SWERolloutSpec.model_validate(assignment.spec)
            config = AgentConfig.from_spec(spec.agent, max_context_tokens=spec.inference.max_context_tokens)
        except (ValidationError, AgentConfigError) as exc:
            await self._setup_failed(assignment, one_line(exc) if isinstance(exc, ValidationError) else str(exc))
            return None
        replay = not isinstance(assignment, wire.Prepare) and assignment.replay
        snapshot = await self.ingest.download(assignment.snapshot) if isinstance(assignment, wire.Resume) else None
        head: Head | None = None
        await self.prefetch.wait(spec.inference.tokenizer)
        try:
            if snapshot is not None:
                snapshot, head = await turn_checkpoints.restore(self.ingest, snapshot)
            kind, agent_state = self._model(spec, config, snapshot)
        except Exception as exc:  # noqa: BLE001 - a bad tokenizer name or endpoint must be reported, not crash-loop
            await self._setup_failed(assignment, f"{type(exc).__name__}: {exc}")
            return None
        instance = spec.instance
        workdir = await self._workdir(instance.workdir)
        if replay and agent_state.get("workdir_diff"):
            problem = await self._restore_worktree(workdir, instance.base_commit, agent_state["workdir_diff"])
            if problem:
                await self.ingest.event(
                    wire.Failed(
                        assignment_id=assignment.id,
                        reason="ReplayFailed",
                        message=problem,
                        log=await self._log_ref(),
                    )
                )
                return None
        inner, client = kind.model, kind.client
        notice, limits_pending = "", False
        if client is not None:
            try:
                notice = await kind.apply_server_limits()
            except Exception as exc:  # noqa: BLE001 - only a prepare may put it off
                if not warm:
                    raise
                log.warning("the inference server's limits are read at the go (%s)", exc)
                limits_pending = True
        abortable = AbortableModel(
            inner,
            client.abort_in_flight if client else None,
            outage_budget=float(spec.inference.outage_budget_seconds),
        )
        abortable.inference_aborts = int(agent_state.get("inference_aborts") or 0)
        abortable.on_send = functools.partial(self.timeline.finish, FIRST_GENERATE)
        if replay:
            loop_turns = int((agent_state.get("loop") or {}).get("turns") or 0)
            kind.note(turn_checkpoints.replay_note(assignment.attempt, loop_turns))
        task = TaskInfo.from_instance(instance, spec.agent.issue_image_mode).model_copy(update={"working_dir": workdir})
        reporter = _ProgressReporter(self.ingest, abortable, kind)
        on_step: Callable[[StepInfo], Awaitable[None]] = reporter.on_step
        checkpoints: CheckpointWriter | None = None
        if kind.checkpointed:
            # A checkpoint at every turn boundary, written while the next turn generates.
            checkpoints = turn_checkpoints.writer(
                self.sandbox, self.ingest, workdir=workdir, base_commit=instance.base_commit,
                attempt=assignment.attempt, head=head, send=reporter.checkpointed,
            )  # fmt: skip
            on_step = _checkpointing(reporter, checkpoints, kind, abortable)
        loop = AgentLoop(
            abortable, self.sandbox, config, task, on_step=on_step,
            before_action=checkpoints.settle if checkpoints else None,
        )  # fmt: skip
        saved = agent_state.get("loop")
        self.timeline.mark("setup")
        return _Run(
            wire_spec=assignment.spec,
            attempt=assignment.attempt,
            spec=spec,
            kind=kind,
            abortable=abortable,
            reporter=reporter,
            loop=loop,
            workdir=workdir,
            notice=notice,
            limits_pending=limits_pending,
            state=LoopState.model_validate(saved) if saved else LoopState(),
            checkpoints=checkpoints,
            fresh_sandbox=replay and bool(saved),
        )

    async def _prepare(self, assignment: wire.Prepare) -> None:
        """A warm start: set the run up (tokenizer, server limits, shell, the first prompt's
        tokens) and hold it for the go; the `run` that follows sends the first /generate."""
        if self._prepared is not None:
            return
        run = await self._setup(assignment, warm=True)
        if run is None:
            return
        try:
            await run.loop.prepare()
            run.kind.render_pending()
        except Exception as exc:  # noqa: BLE001 - the go sets up cold and meets it again, as an exit status
            log.warning("could not prepare the first turn (%s); the run sets it up at the go", exc)
            return
        run.state = run.loop.state
        self._prepared = run
        await self.ingest.event(
            wire.Prepared(assignment_id=assignment.id, context_tokens=run.kind.model.context_tokens)
        )

    def _take_prepared(self, assignment: wire.Run | wire.Resume) -> _Run | None:
        """The prepared run, when the go is for the work it was prepared for (the batch's
        weight version may have moved with the go: the run labels tokens with the new one)."""
        run, self._prepared = self._prepared, None
        if run is None or run.attempt != assignment.attempt:
            return None
        if _without_weight_version(run.wire_spec) != _without_weight_version(assignment.spec):
            log.info("the spec changed since the prepare: setting the run up again")
            return None
        version = (assignment.spec.get("inference") or {}).get("weightVersion")
        run.kind.relabel(version)
        return run

    async def _execute(self, assignment: wire.Run | wire.Resume) -> None:
        run = self._take_prepared(assignment)
        started_report: asyncio.Task[Any] | None = None
        if run is None:
            run = await self._setup(assignment)
            if run is None:
                return
            await self.ingest.event(_started(assignment, run.notice))
        else:
            # Warm: nothing before the first /generate; the start is reported beside it.
            self.timeline.mark(GO)
            if run.limits_pending:
                run.notice = await run.kind.apply_server_limits()
            run.reporter.last_step = time.monotonic()
            started_report = asyncio.create_task(self.ingest.event(_started(assignment, run.notice)))
        instance, kind, abortable, loop = run.spec.instance, run.kind, run.abortable, run.loop
        watcher = asyncio.create_task(self._watch_for_abort(assignment.id, abortable))
        started = time.monotonic()
        self._active = abortable
        try:
            result = await loop.resume(run.state, fresh_sandbox=run.fresh_sandbox)
        finally:
            self._active = None
            watcher.cancel()
            if run.checkpoints is not None:
                await run.checkpoints.drain()
            if started_report is not None:
                await started_report
        # The last progress goes out before the event that ends the run, so the
        # status never shows fewer turns than the result.
        await run.reporter.flush(final=True)
        elapsed = time.monotonic() - started
        if result.partial:
            await self._report_abort(assignment, kind, abortable, result, run.workdir, instance.base_commit)
        else:
            await self._report_finish(assignment, kind, result, elapsed)

    async def _setup_failed(self, assignment: wire.Working, message: str) -> None:
        await self.ingest.event(
            wire.Failed(
                assignment_id=assignment.id,
                reason="RunnerSetupFailed",
                message=message,
                log=await self._log_ref(),
            )
        )

    async def _watch_for_abort(self, assignment_id: str, model: AbortableModel) -> None:
        after = assignment_id
        while True:
            update = await self.ingest.assignment(after=after, wait=30)
            after = update.id
            if update.kind in (wire.AssignmentKind.ABORT, wire.AssignmentKind.STOP):
                log.info("assignment %s: aborting the run", update.id)
                await model.request_abort()
                return

    async def _workdir(self, declared: str) -> str:
        """The repository directory as the sandbox sees it (dev mode checks out elsewhere).

        Bookkeeping commands run outside the agent's bash session (`execute`), so they
        never move the session's working directory or environment."""
        assert self.sandbox is not None
        probe = await self.sandbox.execute(f"test -d {shlex.quote(declared)} && echo yes || pwd", timeout=30)
        out = probe.output.strip().splitlines()
        return declared if out and out[-1] == "yes" else (out[-1] if out else declared)

    async def _worktree_diff(self, workdir: str, base_commit: str) -> str:
        assert self.sandbox is not None
        try:
            return await turn_checkpoints.worktree_diff(
                self.sandbox, workdir, base_commit, index_copy=turn_checkpoints.ABORT_INDEX_COPY
            )
        except SandboxError:
            return ""

    async def _restore_worktree(self, workdir: str, base_commit: str, diff: str) -> str | None:
        assert self.sandbox is not None
        path = "/tmp/swerollout-replay.diff"
        await self.sandbox.write_file(path, diff if diff.endswith("\n") else diff + "\n")
        result = await self.sandbox.execute(f"git apply --whitespace=nowarn {path}", timeout=120, cwd=workdir)
        if result.exit_code != 0:
            return f"could not restore the recorded working tree in the fresh sandbox: {result.output[-2000:]}"
        return None

    async def _report_abort(
        self,
        assignment: wire.Run | wire.Resume,
        kind: kinds.KindRun,
        abortable: AbortableModel,
        result: LoopResult,
        workdir: str,
        base_commit: str,
    ) -> None:
        agent_state = {
            "loop": result.state.model_dump(mode="json"),
            "workdir_diff": await self._worktree_diff(workdir, base_commit),
            "inference_aborts": abortable.inference_aborts,
        }
        blob, weight_version = kind.snapshot(agent_state)
        ref = await self.ingest.upload(wire.ObjectKind.SNAPSHOT, blob)
        await self.ingest.event(
            wire.Aborted(
                assignment_id=assignment.id,
                reason="Suspended" if abortable.requested.is_set() else "InferenceAborted",
                snapshot=ref,
                turns=result.state.turns,
                context_tokens=kind.model.context_tokens,
                weight_version=weight_version,
                log=await self._log_ref(),
            )
        )

    async def _report_finish(
        self, assignment: wire.Run | wire.Resume, kind: kinds.KindRun, result: LoopResult, elapsed: float
    ) -> None:
        submission = result.submission or ""
        exit_status = result.exit_status or "exit_error"
        finished = kind.finished(exit_status=exit_status, submission=submission, error=result.error, elapsed=elapsed)
        trajectory_ref = await self.ingest.upload(wire.ObjectKind.TRAJECTORY, finished.blob)
        patch_ref = await self.ingest.upload(wire.ObjectKind.PATCH, submission.encode()) if submission.strip() else None
        await self.ingest.event(
            wire.Finished(
                assignment_id=assignment.id,
                exit_status=exit_status,
                message=(result.error or "")[:32000],
                trajectory=trajectory_ref,
                patch=patch_ref,
                turns=result.state.turns,
                prompt_tokens=finished.prompt_tokens,
                response_tokens=finished.response_tokens,
                sampled_tokens=finished.sampled_tokens,
                dropped_tokens=finished.dropped_tokens,
                context_tokens=kind.model.context_tokens,
                log=await self._log_ref(),
            )
        )

    # -- eval ------------------------------------------------------------------------

    async def _evaluate(self, assignment: wire.Eval) -> None:
        assert self.sandbox is not None
        timeline = self.eval_timeline
        timeline.mark("assignment")
        spec = api.SWERolloutSpec.model_validate(assignment.spec)
        # Neither waits for the other: the patch comes from the operator, the directory from the sandbox.
        data, workdir = await asyncio.gather(
            self.ingest.download(assignment.patch), self._workdir(spec.instance.workdir)
        )
        patch = data.decode()
        timeline.mark("patch")
        request = EvalRequest(
            instance=spec.instance, patch=patch, workdir=workdir, timeout_seconds=float(spec.reward.timeout_seconds)
        )
        report = await evaluate(self.sandbox, request, on_step=timeline.mark)
        timeline.mark("evaluated")
        report_ref = await self.ingest.upload(wire.ObjectKind.REPORT, report.model_dump_json().encode())
        timeline.finish("uploaded")
        reward = report.to_reward_status()
        await self.ingest.event(
            wire.Evaluated(
                assignment_id=assignment.id,
                report=report_ref,
                reward=wire.RewardReport(
                    resolved=reward.resolved,
                    reward=reward.value,
                    graded=reward.graded,
                    fail_to_pass_passed=reward.fail_to_pass_passed,
                    fail_to_pass_total=reward.fail_to_pass_total,
                    pass_to_pass_passed=reward.pass_to_pass_passed,
                    pass_to_pass_total=reward.pass_to_pass_total,
                    message=reward.message,
                    tests_seconds=reward.tests_seconds,
                ),
                log=await self._log_ref(),
            )
        )


def _started(assignment: wire.Run | wire.Resume, notice: str) -> wire.Started:
    return wire.Started(
        assignment_id=assignment.id,
        reason="InferenceNotice" if notice else "",
        message=notice,
    )


@dataclass
class _Run:
    """A run set up to its first model call (a prepare holds one until the go)."""

    wire_spec: dict[str, Any]
    attempt: int
    spec: api.SWERolloutSpec
    kind: kinds.KindRun
    abortable: AbortableModel
    reporter: _ProgressReporter
    loop: AgentLoop
    workdir: str
    notice: str
    limits_pending: bool
    state: LoopState
    checkpoints: CheckpointWriter | None = None
    """The run's per-turn checkpoint writer (token-tracking runs)."""
    fresh_sandbox: bool = False
    """A replay into a new pod: the shell is prepared again before the next turn."""


def _without_weight_version(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "inference": {k: v for k, v in (spec.get("inference") or {}).items() if k != "weightVersion"}}


def _checkpointing(
    reporter: _ProgressReporter, checkpoints: CheckpointWriter, kind: kinds.KindRun, abortable: AbortableModel
) -> Callable[[StepInfo], Awaitable[None]]:
    """The step callback of a checkpointed run: capture first (before the next turn moves
    the model on), then the progress report."""

    async def on_step(info: StepInfo) -> None:
        agent_state = {"loop": info.state.model_dump(mode="json"), "inference_aborts": abortable.inference_aborts}
        kind.capture(checkpoints, agent_state, turns=info.state.turns)
        await reporter.on_step(info)

    return on_step


class _ProgressReporter:
    """Sends progress at most once a second; the operator coalesces further."""

    def __init__(self, ingest: IngestClient, model: AbortableModel, kind: kinds.KindRun) -> None:
        self.ingest = ingest
        self.model = model
        self.kind = kind
        self.last_sent = 0.0
        self.last_step = time.monotonic()
        self.pending: StepInfo | None = None
        self.last_turns: int | None = None
        self.tool_seconds: list[float] = []
        self._seen = 0
        self._sent_generation = 0
        self.checkpoint: wire.CheckpointReport | None = None

    async def checkpointed(self, report: wire.CheckpointReport) -> None:
        """A checkpoint was stored: the operator hears of it at once (it coalesces the
        status write; a pod lost now replays from here)."""
        self.checkpoint = report
        await self.flush(final=True)

    async def on_step(self, info: StepInfo) -> None:
        now = time.monotonic()
        generation = sum(self.model.generation_seconds[self._seen :])
        self._seen = len(self.model.generation_seconds)
        # Step time minus model time is what the environment (tools) took.
        self.tool_seconds.append(max(0.0, now - self.last_step - generation))
        self.last_step = now
        self.pending = info
        if now - self.last_sent >= 1.0:
            await self.flush()

    async def flush(self, *, final: bool = False) -> None:
        """Send the pending progress; `final` sends it even when no step is pending."""
        if self.pending is not None:
            self.last_turns = self.pending.state.turns
        elif not final or self.last_turns is None:
            return
        generated = self.kind.generated_tokens()
        progress = wire.ProgressReport(
            turns=self.last_turns,
            inference_aborts=self.model.inference_aborts,
            context_tokens=self.model.context_tokens,
            generated_tokens=generated,
            generation_seconds=self.model.generation_seconds[self._sent_generation :][-1000:],
            tool_seconds=self.tool_seconds[-1000:],
            checkpoint=self.checkpoint,
        )
        self._sent_generation = len(self.model.generation_seconds)
        self.tool_seconds = []
        self.pending = None
        self.last_sent = time.monotonic()
        try:
            await self.ingest.progress(progress)
        except Exception as exc:  # noqa: BLE001 - progress is best effort
            log.warning("progress report failed: %s", exc)


def main() -> int:
    timeline = startup.new_timeline()
    timeline.mark("imports")
    log_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=os.environ.get("SWEROLLOUT_LOG_LEVEL", "INFO"), format=log_format)
    tail = LogTail()
    tail.setFormatter(logging.Formatter(log_format))
    logging.getLogger().addHandler(tail)
    try:
        env = RunnerEnv.from_environ(os.environ)
    except RunnerEnvError as exc:
        raise SystemExit(f"agent_runner: {exc}") from exc
    prefetch = TokenizerPrefetch(env.tokenizer, timeline)
    return asyncio.run(Runner(env, log_tail=tail, timeline=timeline, prefetch=prefetch).serve())
