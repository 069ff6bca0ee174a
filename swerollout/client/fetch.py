"""Following rollouts and fetching what they made: wait for a batch or one rollout, stream
and collect the records, and read trajectories and eval reports from the store or the operator."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import httpx
from pydantic import ValidationError

from swerollout.api.base import one_line
from swerollout.api.v1alpha1 import LABEL_BATCH, ConditionStatus, ConditionType, Phase, SWERolloutBatchSpec
from swerollout.client.core import PARALLEL_REQUESTS, ClientCore, Object, kube_error, name_of
from swerollout.client.errors import ClientConfigError, ResultUnavailable, WaitTimeout
from swerollout.client.progress import BatchProgress
from swerollout.client.records import RolloutRecord, build_record, parse_status
from swerollout.client.watch import SharedWatch
from swerollout.kube import KubeError
from swerollout.store import StoreError, open_store
from swerollout.wire.trajectory import Trajectory

ProgressCallback = Callable[[BatchProgress], None] | Callable[[BatchProgress], Awaitable[None]]

# How stale the batch object's spec may be in wait()'s progress reports (it is read again
# at most this often, on a member's change; its own changes move no member at once).
BATCH_SPEC_REFRESH_SECONDS = 2.0


class Fetching(ClientCore):
    """wait, wait_prepared, result, stream_results, results and the fetches of the client."""

    async def wait_prepared(self, batch: str, *, timeout: float | None = None) -> list[str]:
        """Return once no member of ``batch`` is still on its way to Prepared: the names of
        those that are prepared (phase Prepared, condition Prepared true). A member that
        failed meanwhile (its result says why) is not among them."""

        def prepared(obj: Object) -> bool:
            status = parse_status(obj)
            return status.phase is Phase.PREPARED and any(
                c.type == ConditionType.PREPARED.value and c.status is ConditionStatus.TRUE for c in status.conditions
            )

        try:
            async with asyncio.timeout(timeout):
                async with aclosing(self._observe(batch)) as states:
                    async for objects in states:
                        if objects and all(prepared(o) or parse_status(o).phase.is_terminal for o in objects):
                            return sorted(name_of(o) for o in objects if prepared(o))
        except TimeoutError:
            raise WaitTimeout(
                f"batch {batch!r} was not prepared after {timeout} s; see `swerollout list --batch {batch}`"
            ) from None
        raise AssertionError("unreachable: _observe never ends on its own")

    async def wait(
        self, batch: str, *, progress: ProgressCallback | None = None, timeout: float | None = None
    ) -> BatchProgress:
        """Return once every member is Succeeded or Failed; ``progress`` is called on every change."""
        specs: dict[str, SWERolloutBatchSpec] = {}
        read_at: float | None = None
        try:
            async with asyncio.timeout(timeout):
                async with aclosing(self._observe(batch)) as states:
                    async for objects in states:
                        if progress is not None and (
                            read_at is None or time.monotonic() - read_at >= BATCH_SPEC_REFRESH_SECONDS
                        ):
                            # Who suspends whom, for the report: the batch object, re-read now and then.
                            spec = await self.batch_spec(batch)
                            specs = {batch: spec} if spec is not None else {}
                            read_at = time.monotonic()
                        state = BatchProgress.from_objects(batch, objects, specs)
                        if progress is not None:
                            outcome = progress(state)
                            if inspect.isawaitable(outcome):
                                await outcome
                        if state.done:
                            return state
        except TimeoutError:
            raise WaitTimeout(
                f"batch {batch!r} was not finished after {timeout} s; wait again, or abort it with "
                f"`swerollout abort --batch {batch}`"
            ) from None
        raise AssertionError("unreachable: _observe never ends on its own")

    async def result(self, name: str, *, timeout: float | None = None, report: bool = False) -> RolloutRecord:
        """Wait until rollout ``name`` is Succeeded or Failed and return its record.

        Every ``result`` call of this client is served by ONE shared watch (started by the
        first call, stopped by :meth:`aclose`), so a trainer may await one per sample.
        RolloutNotFound when no such rollout exists (or it is deleted while waited for);
        WaitTimeout after ``timeout`` seconds."""
        obj = await self.wait_rollout(name, lambda o: parse_status(o).phase.is_terminal, timeout=timeout)
        return await self.record(obj, report=report)

    async def wait_rollout(self, name: str, done: Callable[[Object], bool], *, timeout: float | None = None) -> Object:
        """The first state of rollout ``name`` for which ``done(obj)`` holds, from the
        client's shared watch (see :meth:`result`)."""
        await self.check_cluster()
        if self._watch is None:
            self._watch = SharedWatch(self.kube, self.namespace, LABEL_BATCH)
        watch = self._watch

        async def missing() -> None:
            watch.seed(await self.get_rollout(name))

        try:
            async with asyncio.timeout(timeout):
                return await watch.until(name, done, missing=missing)
        except TimeoutError:
            raise WaitTimeout(
                f"rollout {name!r} was not finished after {timeout} s; wait again, or abort it with "
                f"abort(names=[{name!r}])"
            ) from None
        except KubeError as exc:
            raise kube_error(exc, "watching SWERollouts") from exc

    async def stream_results(self, batch: str) -> AsyncGenerator[RolloutRecord, None]:
        """Yield each member's record once, as soon as it reaches Succeeded or Failed."""
        seen: set[str] = set()
        async with aclosing(self._observe(batch)) as states:
            async for objects in states:
                fresh = [o for o in objects if parse_status(o).phase.is_terminal and o["metadata"]["uid"] not in seen]
                for obj in fresh:
                    seen.add(obj["metadata"]["uid"])
                    yield await self.record(obj)
                if all(parse_status(o).phase.is_terminal for o in objects):
                    return

    async def results(self, batch: str, *, reports: bool = False) -> list[RolloutRecord]:
        """One record per member in (sample, member) order; unfinished members come back
        as ``aborted`` with empty arrays. ``reports``: also fetch each graded member's full
        eval report (one more read per member)."""
        objects = await self.members(batch)
        limit = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def one(obj: Object) -> RolloutRecord:
            async with limit:
                return await self.record(obj, report=reports)

        records = await asyncio.gather(*(one(o) for o in objects))
        return sorted(records, key=lambda r: (r.sample, r.member, r.name))

    async def record(self, obj: Object, *, report: bool = False) -> RolloutRecord:
        """The record of one SWERollout object (fetching its trajectory when it is finished,
        and its eval report when asked and there is one)."""
        status = parse_status(obj)
        trajectory = None
        if status.phase.is_terminal and status.result is not None and status.result.trajectory is not None:
            trajectory = await self.fetch_trajectory(obj)
        eval_report = None
        if report and status.reward is not None and status.reward.report is not None:
            eval_report = await self.fetch_report(obj)
        return build_record(obj, trajectory, eval_report)

    async def fetch_report(self, obj: Object) -> dict[str, Any]:
        """The rollout's full eval report (JSON: every test and its outcome)."""
        name = str(obj["metadata"]["name"])
        reward = parse_status(obj).reward
        if reward is None or reward.report is None:
            raise ResultUnavailable(f"{name} has no eval report")
        ref = reward.report
        data = await self._fetch_object(obj, "report", ref.ref, ref.sha256)
        try:
            report = json.loads(data)
        except ValueError as exc:
            raise ResultUnavailable(f"the eval report of {name} is not JSON: {exc}") from exc
        if not isinstance(report, dict):
            raise ResultUnavailable(f"the eval report of {name} is not a JSON object")
        return report

    async def fetch_trajectory(self, obj: Object) -> Trajectory:
        name = str(obj["metadata"]["name"])
        result = parse_status(obj).result
        if result is None or result.trajectory is None:
            raise ResultUnavailable(f"{name} has no trajectory yet (phase {parse_status(obj).phase.value})")
        ref = result.trajectory
        data = await self._fetch_object(obj, "trajectory", ref.ref, ref.sha256)
        try:
            return Trajectory.from_bytes(data)
        except (ValueError, ValidationError) as exc:
            why = one_line(exc, "trajectory") if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
            raise ResultUnavailable(f"the trajectory of {name} cannot be decoded: {why}") from exc

    async def _fetch_object(self, obj: Object, kind: str, ref: str, sha256: str) -> bytes:
        """One stored object of the rollout (trajectory, report), checked against its sha256."""
        name = str(obj["metadata"]["name"])
        if self.store_url:
            data = await self._from_store(name, ref, sha256, kind)
        elif self.results_url:
            data = await self._from_operator(obj, kind)
        else:
            raise ClientConfigError(
                "the client cannot fetch trajectories: pass store_url= (--store-url, the result store the "
                "operator writes to) or results_url= (--results-url, the operator's ingest URL)"
            )
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ResultUnavailable(f"the {kind} of {name} does not match its sha256 {sha256}")
        return data

    async def _from_store(self, name: str, ref: str, sha256: str, kind: str = "trajectory") -> bytes:
        try:
            if self._store is None:
                self._store = open_store(self.store_url or "", **self._store_options)
            return await self._store.get(ref, expect_sha256=sha256)
        except StoreError as exc:
            error = ResultUnavailable(f"fetching the {kind} of {name} from {self.store_url} failed: {exc}")
            error.retryable = exc.retryable
            raise error from exc

    async def _from_operator(self, obj: Object, kind: str = "trajectory") -> bytes:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        token = self._results_token or self.kube.config.bearer_token()
        if not token:
            raise ClientConfigError(
                "fetching results from the operator needs a Kubernetes bearer token and this kubeconfig has "
                "none (client certificates cannot be forwarded): pass results_token= or store_url="
            )
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=60.0)
        url = f"{self.results_url}/v1/results/{ns}/{name}/{kind}"
        try:
            response = await self._http.get(url, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            raise ResultUnavailable(f"the operator at {self.results_url} is unreachable: {exc}") from exc
        if response.status_code != 200:
            error = ResultUnavailable(f"GET {url} answered {response.status_code}: {response.text[:300]}")
            error.retryable = response.status_code >= 500
            raise error
        return response.content
