"""The ingest API's wire models: the one contract between the runner and the operator.

Runners hold no Kubernetes credentials; this HTTP API is their only way to talk to
the control side. The runner long-polls for its assignment and pushes progress,
objects (trajectories, snapshots, eval reports) and events. The operator turns
events into phase transitions; everything is idempotent, so a retried request
after a dropped connection changes nothing the first one did not.

Paths (all under the operator's ingest port, bearer token per rollout):

    GET  /v1/rollouts/{ns}/{name}/{uid}/assignment?after=<id>&wait=<s>  -> Assignment
    POST /v1/rollouts/{ns}/{name}/{uid}/progress                     ProgressReport -> Ack
    PUT  /v1/rollouts/{ns}/{name}/{uid}/objects/{kind}               bytes -> StoredObjectRef
    GET  /v1/rollouts/{ns}/{name}/{uid}/objects/{kind}/{sha256}      -> bytes
    POST /v1/rollouts/{ns}/{name}/{uid}/events                       RunnerEvent -> Ack

`IngestClient` is the runner's side (the operator's is its ingest server).
Every call is retried on transport errors, 429 and 5xx with capped exponential
backoff for a long time: the operator restarts (rolling upgrade, crash) must not
lose a runner's result. Retries are safe by construction: uploads are
content-addressed and events carry an idempotency key and go through the phase
machine, so a request that reached the operator before the connection dropped
changes nothing the second time.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from enum import Enum
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from swerollout.api.v1alpha1 import REASON_PATTERN
from swerollout.backoff import Backoff

# Stored objects have one kind taxonomy; the ingest contract names it too.
from swerollout.store.models import ObjectKind as ObjectKind

log = logging.getLogger(__name__)

API_PREFIX = "/v1/rollouts"
TOKEN_HEADER = "Authorization"
IDEMPOTENCY_HEADER = "Idempotency-Key"
OWNER_HEADER = "X-Swerollout-Owner"
"""On a 421 (Misdirected Request) answer: the base URL of the operator replica that owns
the rollout's shard now (a sharded operator); the runner sends this and later requests there."""
SHA256_HEADER = "X-Content-SHA256"
# A reason the runner sends becomes a status condition's reason: held to the condition's
# rule here, so a bad one is the runner's 400 naming the field, not a failed status write.
RunnerReason = Annotated[str, StringConstraints(max_length=1024, pattern=f"^$|{REASON_PATTERN}")]
"""Empty (the operator's default reason) or a condition reason."""
MAX_OBJECT_BYTES = 512 * 1024 * 1024
"""Largest object a runner may upload (trajectories at 1M tokens are ~10 MiB)."""
MAX_LOG_BYTES = 1024 * 1024
"""Largest runner log upload: the runner keeps the last this-many bytes of its log."""
MAX_JSON_BYTES = 1024 * 1024
"""Largest JSON body (progress, events)."""
MAX_WAIT_SECONDS = 60.0


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoredObjectRef(WireModel):
    kind: ObjectKind
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)
    ref: str
    """Store URI (operator-side); runners address objects by kind and sha256."""


class AssignmentKind(str, Enum):
    WAIT = "wait"
    """Nothing to do yet; poll again."""
    RUN = "run"
    """Start the agent from the beginning (at once, from what a `prepare` built)."""
    PREPARE = "prepare"
    """The rollout is suspended before its first run: load the tokenizer, build the first
    prompt, report `prepared`, and wait for `run` (which then sends the first /generate
    with no other work on the way)."""
    RESUME = "resume"
    """Restore the snapshot and continue; with `replay`, first replay the recorded
    actions into this (fresh) sandbox."""
    ABORT = "abort"
    """Abort the in-flight generation now, snapshot, report `aborted`, keep the sandbox."""
    EVAL = "eval"
    """Apply the patch in this (fresh) sandbox, run the eval script, report the reward."""
    STOP = "stop"
    """The rollout is over for this pod; exit."""


class _Told(WireModel):
    id: str
    """Changes whenever the work changes; the runner acts once per id."""
    attempt: int = 1


class Wait(_Told):
    kind: Literal[AssignmentKind.WAIT] = AssignmentKind.WAIT


class Stop(_Told):
    kind: Literal[AssignmentKind.STOP] = AssignmentKind.STOP


class Abort(_Told):
    kind: Literal[AssignmentKind.ABORT] = AssignmentKind.ABORT


class Run(_Told):
    kind: Literal[AssignmentKind.RUN] = AssignmentKind.RUN
    spec: dict[str, Any]
    """The SWERollout spec (wire form)."""
    replay: bool = False
    """A fresh pod after the last one was lost with no checkpoint yet: it starts over, and
    its trajectory notes the replay."""


class Prepare(_Told):
    kind: Literal[AssignmentKind.PREPARE] = AssignmentKind.PREPARE
    spec: dict[str, Any]


class Resume(_Told):
    kind: Literal[AssignmentKind.RESUME] = AssignmentKind.RESUME
    spec: dict[str, Any]
    snapshot: StoredObjectRef
    """The snapshot (or per-turn checkpoint head) to restore."""
    replay: bool = False
    """The sandbox is new; replay the recorded actions first."""


class Eval(_Told):
    kind: Literal[AssignmentKind.EVAL] = AssignmentKind.EVAL
    spec: dict[str, Any]
    patch: StoredObjectRef
    """The candidate patch."""
    exit_status: str
    """The rollout's exit status (for gating and the report)."""


Assignment = Annotated[Wait | Stop | Abort | Run | Prepare | Resume | Eval, Field(discriminator="kind")]
"""What a runner is told: one type per kind, each with the fields that kind needs."""
ASSIGNMENT: TypeAdapter[Assignment] = TypeAdapter(Assignment)
Working = Run | Resume | Prepare
"""The assignments a rollout runner sets a run up for."""


class CheckpointReport(WireModel):
    """The newest per-turn checkpoint a runner stored (agent_runner.pod.checkpoint): the head
    segment of its chain, and what it covers."""

    head: StoredObjectRef
    attempt: int = Field(ge=1)
    """The attempt (pod) that wrote it; a report of an older attempt is ignored."""
    segments: int = Field(ge=1)
    """Segments a restore reads, from the last whole one to the head."""
    chain_bytes: int = Field(ge=0)
    turns: int = Field(ge=0)
    context_tokens: int = Field(ge=0)
    sampled_tokens: int = Field(ge=0)
    """Tokens sampled up to this boundary, dropped ones included (the budget spent)."""


class ProgressReport(WireModel):
    """Fine-grained progress; the operator coalesces it into status and metrics."""

    turns: int = Field(ge=0)
    context_tokens: int = Field(ge=0)
    generated_tokens: int = Field(ge=0)
    generation_seconds: list[float] = Field(default_factory=list, max_length=1000)
    """Model time of each turn since the last report."""
    tool_seconds: list[float] = Field(default_factory=list, max_length=1000)
    """Tool execution time of each turn since the last report."""
    inference_aborts: int = Field(default=0, ge=0)
    """Aborts from the inference side (pause_generation, abort_request) that the run rode out by re-sampling."""
    checkpoint: CheckpointReport | None = None
    """The newest checkpoint stored, when there is one (sent as soon as each one is stored)."""


class EventKind(str, Enum):
    STARTED = "started"
    """The runner picked the assignment up (run or resume)."""
    PREPARED = "prepared"
    """The runner did its `prepare`: `context_tokens` is the first prompt's size."""
    ABORTED = "aborted"
    """The run stopped mid-way; `snapshot` holds its state."""
    FINISHED = "finished"
    """The run ended; `trajectory` holds the result. Whether it is truncated follows from
    its exit status (swerollout.exit_status.is_truncated), so it is not sent."""
    EVALUATED = "evaluated"
    """The eval pod graded the patch; `reward` holds the result."""
    FAILED = "failed"
    """The runner cannot do its assignment (sandbox unreachable, bad spec, ...)."""


class RewardReport(WireModel):
    resolved: bool
    reward: float
    graded: bool = True
    fail_to_pass_passed: int = 0
    fail_to_pass_total: int = 0
    pass_to_pass_passed: int = 0
    pass_to_pass_total: int = 0
    message: str = ""
    tests_seconds: float | None = Field(default=None, ge=0)
    """Wall time of the eval script (the tests' own time); None when no test ran."""


class _Report(WireModel):
    assignment_id: str
    """The assignment this event answers."""
    message: str = Field(default="", max_length=32768)
    log: StoredObjectRef | None = None
    """The runner's own log so far (kind `log`), kept in status.logs after its pod is gone."""


class Started(_Report):
    kind: Literal[EventKind.STARTED] = EventKind.STARTED
    reason: RunnerReason = ""
    """With a `message`: the CamelCase reason of the runner's notice (RunnerNotice when empty)."""


class Prepared(_Report):
    kind: Literal[EventKind.PREPARED] = EventKind.PREPARED
    context_tokens: int = Field(ge=0)
    """The first prompt's size."""


class Aborted(_Report):
    kind: Literal[EventKind.ABORTED] = EventKind.ABORTED
    snapshot: StoredObjectRef
    reason: RunnerReason = "Suspended"
    """`Suspended` or `InferenceAborted`."""
    turns: int = Field(default=0, ge=0)
    context_tokens: int = Field(default=0, ge=0)
    weight_version: str | None = None


class Finished(_Report):
    kind: Literal[EventKind.FINISHED] = EventKind.FINISHED
    exit_status: str = Field(min_length=1, max_length=64)
    trajectory: StoredObjectRef
    patch: StoredObjectRef | None = None
    """The submission, when it is not empty."""
    turns: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    response_tokens: int = Field(default=0, ge=0)
    sampled_tokens: int = Field(default=0, ge=0)
    """Sampled tokens kept in the trajectory (loss mask 1)."""
    dropped_tokens: int = Field(default=0, ge=0)
    """Sampled tokens of aborted requests that were dropped (onAbort Drop, or without logprobs)."""
    context_tokens: int = Field(default=0, ge=0)


class Evaluated(_Report):
    kind: Literal[EventKind.EVALUATED] = EventKind.EVALUATED
    reward: RewardReport
    report: StoredObjectRef | None = None


class Failed(_Report):
    kind: Literal[EventKind.FAILED] = EventKind.FAILED
    reason: RunnerReason = ""
    """A CamelCase reason (RunnerFailed when empty)."""


RunnerEvent = Annotated[Started | Prepared | Aborted | Finished | Evaluated | Failed, Field(discriminator="kind")]
"""A runner's report: one type per kind, each with the fields that kind must carry."""
RUNNER_EVENT: TypeAdapter[RunnerEvent] = TypeAdapter(RunnerEvent)


class Ack(WireModel):
    ok: bool = True
    duplicate: bool = False
    """True when this request repeated one already applied (same idempotency key)."""
    phase: str | None = None


class ErrorBody(WireModel):
    error: str
    message: str


# -- the runner's client ------------------------------------------------------------------


class IngestError(Exception):
    """The operator refused a request (4xx other than 429): retrying will not help."""


class _Unanswered(Exception):
    """No answer, 429 or 5xx: the operator may answer if asked again (it may be restarting)."""


class IngestClient:
    def __init__(
        self,
        base_url: str,
        *,
        namespace: str,
        name: str,
        uid: str,
        token: str,
        role: str = "rollout",
        attempt: int = 1,
        give_up_after: float = 900.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport`: a connection pool shared by many clients in one process (the
        lifecycle bench runs thousands of runners); the caller closes it. Default: our own."""
        self._prefix = f"{API_PREFIX}/{namespace}/{name}/{uid}"
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={
                "Authorization": f"Bearer {token}",
                "X-Swerollout-Role": role,
                "X-Swerollout-Attempt": str(attempt),
            },
            timeout=httpx.Timeout(30.0, read=MAX_WAIT_SECONDS + 30.0),
            transport=transport,
        )
        self._owns_transport = transport is None
        self._owner = ""
        """The replica of a sharded operator that owns this rollout (its base URL; empty: base_url)."""
        # The operator restarting (upgrade, crash) must not kill runners: keep trying for minutes.
        self._backoff = Backoff(first_seconds=0.5, max_seconds=15.0, budget_seconds=give_up_after)

    async def aclose(self) -> None:
        if self._owns_transport:
            await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        def retrying(exc: BaseException, delay: float) -> None:
            log.warning("ingest %s %s failed (%s); retrying in %.1fs", method, path, exc, delay)

        loop = self._backoff.retrying(retryable=lambda exc: isinstance(exc, _Unanswered), on_retry=retrying)
        try:
            async for attempt in loop:
                with attempt:
                    return await self._once(method, path, **kwargs)
        except _Unanswered as exc:
            raise IngestError(
                f"{method} {path}: the operator did not answer for {loop.schedule.elapsed:.0f}s ({exc})"
            ) from None
        raise AssertionError("unreachable: the retry loop returns or raises")

    async def _once(self, method: str, path: str, *, followed: bool = False, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, self._owner + self._prefix + path, **kwargs)
        except httpx.TransportError as exc:
            self._owner = ""  # the replica we were sent to is gone (its shard moves on): ask the Service again
            raise _Unanswered(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code < 400:
            return response
        owner = response.headers.get(OWNER_HEADER, "")
        if response.status_code == 421 and owner.startswith(("http://", "https://")):
            # A sharded operator: another replica owns this rollout. Go there, at once the
            # first time (a report repeated across the move is idempotent), else retry later.
            self._owner = owner.rstrip("/")
            if not followed:
                return await self._once(method, path, followed=True, **kwargs)
            raise _Unanswered(f"HTTP 421 (sent to {self._owner})")
        if response.status_code != 429 and response.status_code < 500:
            raise IngestError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        raise _Unanswered(f"HTTP {response.status_code}")

    async def assignment(self, *, after: str | None, wait: float) -> Assignment:
        params = {"wait": str(wait)}
        if after:
            params["after"] = after
        response = await self._call("GET", "/assignment", params=params)
        return ASSIGNMENT.validate_json(response.content)

    async def progress(self, progress: ProgressReport) -> None:
        await self._call(
            "POST", "/progress", content=progress.model_dump_json(), headers={"Content-Type": "application/json"}
        )

    async def upload(self, kind: ObjectKind, data: bytes) -> StoredObjectRef:
        response = await self._call(
            "PUT",
            f"/objects/{kind.value}",
            content=data,
            headers={SHA256_HEADER: hashlib.sha256(data).hexdigest(), "Content-Type": "application/octet-stream"},
        )
        return StoredObjectRef.model_validate_json(response.content)

    async def download(self, ref: StoredObjectRef) -> bytes:
        response = await self._call("GET", f"/objects/{ref.kind.value}/{ref.sha256}")
        data = response.content
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise IngestError(f"downloaded {ref.kind.value} {ref.sha256} does not match its sha256")
        return data

    async def event(self, event: RunnerEvent) -> Ack:
        key = secrets.token_hex(16)  # the same key on every retry of this event
        response = await self._call(
            "POST",
            "/events",
            content=event.model_dump_json(),
            headers={"Content-Type": "application/json", IDEMPOTENCY_HEADER: key},
        )
        return Ack.model_validate_json(response.content)
