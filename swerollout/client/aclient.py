"""The asyncio trainer client: submit a batch, wait, abort/resume, collect results.

    async with AsyncRolloutClient.connect(store_url="file:///data/results") as client:
        await client.submit_batch(instances, 8, batch="step-0042", inference={...})
        await client.wait("step-0042", progress=print)
        records = await client.results("step-0042")

Every Kubernetes call goes through :mod:`swerollout.kube`; every failure surfaces
as a :class:`~swerollout.client.errors.ClientError` naming the fix.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError

from swerollout import fleet
from swerollout.api.base import one_line
from swerollout.api.suspension import batch_name
from swerollout.api.v1alpha1 import (
    API_VERSION,
    BATCH_PLURAL,
    GROUP,
    KIND,
    LABEL_BATCH,
    LABEL_GROUP_SIZE,
    LABEL_MEMBER,
    LABEL_SAMPLE,
    PLURAL,
    VERSION,
    Agent,
    AgentKind,
    ConditionStatus,
    ConditionType,
    Inference,
    Instance,
    Mode,
    Phase,
    Reward,
    SandboxSpec,
    SWERolloutBatchSpec,
    SWERolloutSpec,
)
from swerollout.backoff import Backoff
from swerollout.client.batches import BatchWriter
from swerollout.client.errors import (
    ClientConfigError,
    ClientError,
    CrdNotInstalled,
    EndpointUnreachable,
    KubeApiError,
    NamespaceNotFound,
    ResultUnavailable,
    RolloutNotFound,
    UnknownBatch,
    WaitTimeout,
)
from swerollout.client.naming import check_batch_name, rollout_name
from swerollout.client.progress import BatchProgress
from swerollout.client.records import (
    ANNOTATION_INSTANCE_ID,
    ANNOTATION_TRAINER_LABELS,
    RolloutRecord,
    build_record,
    parse_status,
)
from swerollout.client.watch import Listed, SharedWatch, list_and_watch
from swerollout.instances import InstanceError, SWEBenchInstance, instance_from_row, to_api_instance
from swerollout.issue_images import spec_problem
from swerollout.kube import (
    NAMESPACES,
    SWEROLLOUTS,
    AsyncKubeClient,
    ConfigError,
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    aretry,
    load_config,
)
from swerollout.store import StoreError, open_store
from swerollout.store.protocol import ResultStore
from swerollout.tokenizer_check import ordinary_text_problem
from swerollout.wire.trajectory import Trajectory

FIELD_MANAGER = "swerollout-client"
RESERVED_LABELS = (LABEL_BATCH, LABEL_MEMBER, LABEL_SAMPLE, LABEL_GROUP_SIZE)
InstanceLike = Instance | SWEBenchInstance | Mapping[str, Any]
Object = dict[str, Any]
T = TypeVar("T")
U = TypeVar("U")
TrainerLabel = str | int | float | bool | None
ProgressCallback = Callable[[BatchProgress], None] | Callable[[BatchProgress], Awaitable[None]]

log = logging.getLogger(__name__)

# Parallel requests for submit/abort/resume/results (the API server throttles beyond this).
PARALLEL_REQUESTS = 16
# Parallel abort/resume marks: small patches, and a batch abort should land in seconds.
MARK_PARALLEL_REQUESTS = 64
# spec.inference.weightVersion's maxLength in the CRD.
MAX_WEIGHT_VERSION = 128
# The inference servers' admin key for abort(batch), when the caller passes none.
INFERENCE_ADMIN_KEY_ENV = "SWEROLLOUT_INFERENCE_ADMIN_KEY"
# One /abort_request may take this long (seconds); the runners abort their own requests
# by rid anyway, so a server that does not answer only delays abort()'s return.
INFERENCE_ABORT_TIMEOUT = 5.0
# Optimistic-concurrency retries of one abort/resume patch before giving up.
MAX_CONFLICT_RETRIES = 5
# How stale the batch object's spec may be in wait()'s progress reports (it is read again
# at most this often, on a member's change; its own changes move no member at once).
BATCH_SPEC_REFRESH_SECONDS = 2.0
# Transient failures of one abort/resume mark (reset, 429, 5xx) are retried this long:
# a trainer's abort must ride out an API server restart of a few seconds.
MARK_BACKOFF = Backoff(first_seconds=0.2, max_seconds=5.0, budget_seconds=30.0)


async def check_inference_endpoint(endpoint: str, *, timeout: float = 5.0) -> None:
    """Raise EndpointUnreachable unless ``<endpoint>/health`` answers 200."""
    url = endpoint.rstrip("/") + "/health"
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            response = await http.get(url)
    except httpx.HTTPError as exc:
        raise EndpointUnreachable(
            f"the inference endpoint {endpoint} is unreachable ({type(exc).__name__}: {exc}); start the SGLang "
            "server there or fix inference.endpoint (--endpoint)"
        ) from exc
    if response.status_code != 200:
        raise EndpointUnreachable(
            f"the inference endpoint {endpoint} answered GET /health with {response.status_code}; wait until the "
            "server is ready or fix inference.endpoint (--endpoint)"
        )


async def _check_issue_images(specs: Sequence[SWERolloutSpec], members: Sequence[Inference]) -> None:
    """Refuse at submit what would fail every rollout: issue images for a text-only template."""
    for spec in specs:
        if not spec.instance.issue_images:
            continue
        for inference in members or [spec.inference]:
            problem = await asyncio.to_thread(spec_problem, spec.model_copy(update={"inference": inference}))
            if problem:
                raise ClientConfigError(f"{spec.instance.instance_id}: {problem}")


async def _check_tokenizers(specs: Sequence[SWERolloutSpec], members: Sequence[Inference]) -> None:
    """Refuse at submit a tokenizer that cannot spell ordinary text: every rollout would record
    its unknown token where the agent saw a character (the runner refuses it too)."""
    names = {
        inference.tokenizer
        for spec in specs
        if spec.agent.kind is not AgentKind.CHAT_AGENT
        for inference in members or [spec.inference]
        if inference.tokenizer
    }
    for name in sorted(names):
        problem = await asyncio.to_thread(ordinary_text_problem, name)
        if problem:
            raise ClientConfigError(problem)


def _to_instance(item: InstanceLike, index: int) -> Instance:
    try:
        if isinstance(item, Instance):
            return item
        if isinstance(item, SWEBenchInstance):
            return to_api_instance(item)
        if "FAIL_TO_PASS" in item or "base_commit" in item:
            # A dataset row as published (SWE-bench, SWE-Gym, SWE-smith, SWE-rebench).
            return to_api_instance(instance_from_row(item))
        return Instance.model_validate(item)
    except ValidationError as exc:
        raise ClientConfigError(f"instance #{index} is not valid: {one_line(exc, '')}") from exc
    except InstanceError as exc:
        raise ClientConfigError(f"instance #{index} is not valid: {exc}") from exc


def _kube_error(exc: KubeError, doing: str) -> ClientError:
    if isinstance(exc, ConfigError):
        return ClientConfigError(f"{doing}: {exc}")
    return KubeApiError(f"{doing}: {exc}", retryable=exc.retryable)


def _extra_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    extra = dict(labels or {})
    clash = sorted(set(extra) & set(RESERVED_LABELS))
    if clash:
        raise ClientConfigError(f"labels {clash} are set by the client itself; remove them from labels=")
    return extra


def _trainer_annotation(values: Mapping[str, TrainerLabel]) -> str:
    """trainer_labels as the annotation's JSON (an object of JSON scalars)."""
    for key, value in values.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, (str, int, float, bool))):
            raise ClientConfigError(
                f"trainer_labels[{key!r}] is a {type(value).__name__}; trainer labels are strings, numbers, "
                "booleans or None (convert ids with str() or int())"
            )
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"))


def _inference(
    value: Inference | Mapping[str, Any], weight_version: str | None, max_sampled_tokens: int | None, what: str
) -> Inference:
    """The validated inference block with the per-submit overrides applied."""
    try:
        inf = value if isinstance(value, Inference) else Inference.model_validate(value)
        updates: dict[str, Any] = {}
        if weight_version is not None:
            updates["weightVersion"] = weight_version
        if max_sampled_tokens is not None:
            updates["maxSampledTokens"] = max_sampled_tokens
        if updates:
            inf = Inference.model_validate({**inf.to_wire(), **updates})
        return inf
    except ValidationError as exc:
        root = "spec.inference" if what == "inference" else what
        raise ClientConfigError(f"{what} is not valid: {one_line(exc, root)}") from exc


def _spec(
    instance: Instance,
    inference: Inference,
    agent: Agent | Mapping[str, Any] | None,
    mode: Mode | str,
    reward: Reward | Mapping[str, Any] | None,
    sandbox: SandboxSpec | Mapping[str, Any] | None,
) -> SWERolloutSpec:
    try:
        spec = SWERolloutSpec.model_validate(
            {
                "instance": instance,
                "inference": inference,
                "agent": agent if agent is not None else Agent(),
                "mode": Mode(mode),
                "reward": reward if reward is not None else Reward(),
                "sandbox": sandbox if sandbox is not None else SandboxSpec(),
            }
        )
    except (ValidationError, ValueError) as exc:
        why = one_line(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ClientConfigError(f"the rollout spec is not valid: {why}") from exc
    if spec.agent.kind is not AgentKind.CHAT_AGENT and not inference.tokenizer:
        raise ClientConfigError(
            f"inference.tokenizer is required for {spec.agent.kind.value}: set it (--tokenizer) to a "
            "bundled name such as qwen-2.5 or a tokenizer directory, or use agent kind ChatAgent"
        )
    return spec


async def _both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Both at once; when one fails the other is cancelled (not left running after the
    call has failed, and after the client is closed), and the failure is raised as is."""
    a, b = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        return await a, await b
    except BaseException:
        for task in (a, b):
            task.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
        raise


def _name(obj: Object) -> str:
    return str(obj["metadata"]["name"])


def _unfinished(obj: Object) -> bool:
    return not parse_status(obj).phase.is_terminal


def _own_suspend(obj: Object) -> bool:
    """The rollout's own spec.suspend (its batch may suspend it as well)."""
    return bool((obj.get("spec") or {}).get("suspend"))


def _submit_wire(spec: SWERolloutSpec) -> Object:
    # spec.suspend is left out so a re-submit never resumes an aborted member.
    wire = spec.to_wire()
    wire.pop("suspend", None)
    return wire


class AsyncRolloutClient:
    """Creates and follows SWERollouts of one namespace.

    ``store_url`` (the result store the operator writes to, e.g. ``file:///data``
    or ``s3://bucket/prefix``) or ``results_url`` (the operator's ingest URL, which
    serves ``/v1/results/...`` to callers with a Kubernetes bearer token) tells
    ``results`` where to fetch trajectories from; the store wins when both are set.
    """

    def __init__(
        self,
        kube: AsyncKubeClient,
        namespace: str | None = None,
        *,
        store_url: str | None = None,
        store_options: Mapping[str, Any] | None = None,
        results_url: str | None = None,
        results_token: str | None = None,
        inference_admin_key: str | None = None,
        owns_kube: bool = False,
    ) -> None:
        self.kube = kube
        self.namespace = namespace or kube.config.namespace
        self.store_url = store_url
        self._store_options = dict(store_options or {})
        self.results_url = results_url.rstrip("/") if results_url else None
        self._results_token = results_token
        self._inference_admin_key = inference_admin_key or os.environ.get(INFERENCE_ADMIN_KEY_ENV) or None
        self._owns_kube = owns_kube
        self._store: ResultStore | None = None
        self._http: httpx.AsyncClient | None = None
        self._checked = False
        self._batch_crd = False
        """Whether the API server serves SWERolloutBatch (else batch abort/resume marks each member)."""
        self._batches = BatchWriter(kube, self.namespace, FIELD_MANAGER)
        self._batches_checked: set[str] = set()
        """Batches whose object submit found fit for new members (one read per batch)."""
        self._watch: SharedWatch | None = None

    @classmethod
    def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        namespace: str | None = None,
        **options: Any,
    ) -> AsyncRolloutClient:
        """Build from ``kubeconfig``, else $KUBECONFIG, else ~/.kube/config, else the pod's identity."""
        try:
            config = load_config(kubeconfig, context=context)
        except ConfigError as exc:
            raise ClientConfigError(
                f"no usable Kubernetes configuration: {exc}. Pass --kubeconfig PATH (kubeconfig=), set "
                "KUBECONFIG, or run `swerollout dev up` for a local cluster"
            ) from exc
        return cls(AsyncKubeClient(config), namespace, owns_kube=True, **options)

    @classmethod
    def in_cluster(
        cls, token_dir: str | os.PathLike[str] | None = None, *, namespace: str | None = None, **options: Any
    ) -> AsyncRolloutClient:
        """Build from the pod's ServiceAccount (token, ca.crt and namespace under ``token_dir``)."""
        try:
            kube = AsyncKubeClient.in_cluster(token_dir)
        except ConfigError as exc:
            raise ClientConfigError(
                f"the in-cluster identity is not usable: {exc}. Outside a pod, use connect(kubeconfig=...)"
            ) from exc
        return cls(kube, namespace, owns_kube=True, **options)

    async def aclose(self) -> None:
        if self._watch is not None:
            await self._watch.aclose()
            self._watch = None
        if self._store is not None:
            await self._store.aclose()
            self._store = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._owns_kube:
            await self.kube.aclose()

    async def __aenter__(self) -> AsyncRolloutClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    # --- pre-flight -----------------------------------------------------------------

    async def check_cluster(self) -> None:
        """Fail with a clear error when the CRD is missing or the namespace does not exist."""
        if self._checked:
            return
        try:
            group = await self.kube.request("GET", f"/apis/{GROUP}/{VERSION}")
        except NotFound:
            raise CrdNotInstalled(
                f"the API server does not serve {PLURAL}.{GROUP}/{VERSION}: install the CRD "
                "(kubectl apply --server-side -f crds/, or helm install swerollout helm/swerollout)"
            ) from None
        except KubeError as exc:
            raise _kube_error(exc, "checking that the SWERollout CRD is installed") from exc
        if not any(r.get("name") == PLURAL for r in group.get("resources") or []):
            raise CrdNotInstalled(f"{GROUP}/{VERSION} does not list {PLURAL}: install the current CRD from crds/")
        self._batch_crd = any(r.get("name") == BATCH_PLURAL for r in group.get("resources") or [])
        try:
            await self.kube.get(NAMESPACES, self.namespace)
        except NotFound:
            raise NamespaceNotFound(
                f"namespace {self.namespace!r} does not exist: pass the right one (--namespace / namespace=) "
                "or create it (kubectl create namespace ...)"
            ) from None
        except Forbidden:
            pass  # callers limited to their namespace may not read Namespace objects
        except KubeError as exc:
            raise _kube_error(exc, f"checking namespace {self.namespace!r}") from exc
        self._checked = True

    # --- reading --------------------------------------------------------------------

    async def list_rollouts(self, batch: str | None = None) -> list[Object]:
        """The SWERollouts of the namespace (of one batch when given), sorted by name."""
        await self.check_cluster()
        selector = f"{LABEL_BATCH}={batch}" if batch else None
        try:
            # Reads are idempotent: ride out a reset, 429 or 5xx as the marks do.
            items = await aretry(lambda: self._listed(selector))
        except KubeError as exc:
            raise _kube_error(exc, f"listing SWERollouts in {self.namespace}") from exc
        return sorted(items, key=lambda o: str(o["metadata"]["name"]))

    async def _listed(self, selector: str | None) -> list[Object]:
        return [o async for o in self.kube.iter_items(SWEROLLOUTS, self.namespace, label_selector=selector)]

    async def get_rollout(self, name: str) -> Object:
        await self.check_cluster()
        try:
            return await aretry(lambda: self.kube.get(SWEROLLOUTS, name, self.namespace))
        except NotFound:
            raise RolloutNotFound(
                f"no SWERollout named {name!r} in namespace {self.namespace!r}; `swerollout list` shows what exists"
            ) from None
        except KubeError as exc:
            raise _kube_error(exc, f"reading SWERollout {name}") from exc

    async def members(self, batch: str) -> list[Object]:
        """The batch's SWERollouts; UnknownBatch when there are none."""
        items = await self.list_rollouts(batch)
        if not items:
            raise self._unknown_batch(batch)
        return items

    async def batch_specs(self) -> dict[str, SWERolloutBatchSpec]:
        """The namespace's SWERolloutBatch specs by name (one LIST): with
        :func:`~swerollout.client.progress.member_state` they tell who is suspended. Empty
        where the CRD is not installed or the identity may not list them (warned)."""
        await self.check_cluster()
        return await self._batches.all_if_allowed() if self._batch_crd else {}

    async def batch_spec(self, batch: str) -> SWERolloutBatchSpec | None:
        """The spec of the batch's SWERolloutBatch; None when it has none (or the CRD is
        not installed, or the identity may not read it: warned)."""
        await self.check_cluster()
        return await self._batches.get_if_allowed(batch) if self._batch_crd else None

    def _unknown_batch(self, batch: str) -> UnknownBatch:
        return UnknownBatch(
            f"batch {batch!r} has no SWERollouts in namespace {self.namespace!r} (label {LABEL_BATCH}={batch}); "
            "check the batch name and --namespace, `swerollout list` shows the batches that exist"
        )

    # --- submit ---------------------------------------------------------------------

    async def submit_batch(
        self,
        instances: Iterable[InstanceLike],
        group_size: int,
        *,
        batch: str,
        inference: Inference | Mapping[str, Any],
        agent: Agent | Mapping[str, Any] | None = None,
        mode: Mode | str = Mode.TRAIN,
        labels: Mapping[str, str] | None = None,
        weight_version: str | None = None,
        max_sampled_tokens: int | None = None,
        reward: Reward | Mapping[str, Any] | None = None,
        sandbox: SandboxSpec | Mapping[str, Any] | None = None,
        check_endpoint: bool = False,
        member_inference: Sequence[Inference | Mapping[str, Any]] | None = None,
        trainer_labels: Sequence[Mapping[str, TrainerLabel]] | None = None,
        prepared: bool = False,
    ) -> list[str]:
        """Create ``len(instances) x group_size`` SWERollouts named ``<batch>-<sample>-<member>``.

        ``prepared`` submits the batch suspended (:meth:`prepare`, before the rollouts
        exist): each member is *prepared* (pod and sandbox up, tokenizer loaded, first
        prompt built; phase Prepared) and parks until ``resume(batch)``, which sends every
        first ``/generate`` at once. Submit step N+1 prepared while step N trains.

        ``weight_version`` and ``max_sampled_tokens`` set ``spec.inference.weightVersion``
        and ``spec.inference.maxSampledTokens`` (the cap on tokens the policy may sample in
        the whole rollout; reaching it ends the run like the context limit, ``truncated``).
        ``member_inference`` (one per group member) gives member *m* its own policy
        server, e.g. to compare two policies on the same tasks within one group.
        ``trainer_labels`` (one mapping per instance, JSON scalars) travel with every
        member of that sample and come back as ``RolloutRecord.trainer_labels``: the
        trainer's own ids (uid, index, ...).

        Server-side apply with field manager ``swerollout-client`` makes a repeated call
        a no-op. ``spec.suspend`` is left out so a re-submit never resumes an aborted
        member. Returns the names in (sample, member) order.
        """
        self._check_batch(batch)
        if group_size < 1:
            raise ClientConfigError(f"group_size (--group-size) must be at least 1, got {group_size}")
        extra_labels = _extra_labels(labels)
        api_instances = [_to_instance(item, i) for i, item in enumerate(instances)]
        if not api_instances:
            raise ClientConfigError("instances is empty: pass at least one SWE-bench instance")
        if trainer_labels is not None and len(trainer_labels) != len(api_instances):
            raise ClientConfigError(
                f"trainer_labels has {len(trainer_labels)} entries; it needs one per instance ({len(api_instances)})"
            )
        per_sample_labels = [_trainer_annotation(t) for t in trainer_labels] if trainer_labels is not None else None
        inf = _inference(inference, weight_version, max_sampled_tokens, "inference")
        specs = [_spec(inst, inf, agent, mode, reward, sandbox) for inst in api_instances]
        per_member: list[Object] | None = None
        members: list[Inference] = []
        if member_inference is not None:
            if len(member_inference) != group_size:
                raise ClientConfigError(
                    f"member_inference has {len(member_inference)} entries; it needs one per group member ({group_size})"
                )
            members = [_inference(m, weight_version, max_sampled_tokens, "member_inference") for m in member_inference]
            per_member = [m.to_wire() for m in members]
        await _check_issue_images(specs, members)
        await _check_tokenizers(specs, members)
        if check_endpoint:
            for endpoint in {inf.endpoint, *(m["endpoint"] for m in per_member or [])}:
                await check_inference_endpoint(endpoint)
        await self.check_cluster()
        await self._check_batch_object(batch)
        if prepared:
            await self.prepare(batch)

        bodies = []
        for sample, spec in enumerate(specs):
            wire = _submit_wire(spec)
            for member in range(group_size):
                member_spec = wire if per_member is None else {**wire, "inference": per_member[member]}
                bodies.append(
                    self._body(
                        batch,
                        sample,
                        member,
                        spec.instance.instance_id,
                        member_spec,
                        extra_labels,
                        per_sample_labels[sample] if per_sample_labels is not None else None,
                        group_size=group_size,
                    )
                )
        return await self._apply(bodies)

    async def submit_one(
        self,
        instance: InstanceLike,
        *,
        batch: str,
        sample: int,
        member: int = 0,
        inference: Inference | Mapping[str, Any],
        agent: Agent | Mapping[str, Any] | None = None,
        mode: Mode | str = Mode.TRAIN,
        labels: Mapping[str, str] | None = None,
        trainer_labels: Mapping[str, TrainerLabel] | None = None,
        weight_version: str | None = None,
        max_sampled_tokens: int | None = None,
        reward: Reward | Mapping[str, Any] | None = None,
        sandbox: SandboxSpec | Mapping[str, Any] | None = None,
        check_endpoint: bool = False,
    ) -> str:
        """Create one SWERollout ``<batch>-<sample>-<member>`` (for per-sample trainer hooks);
        returns its name. Same fields and idempotence as :meth:`submit_batch`; wait for it
        with :meth:`result`. Members of one GRPO group share ``batch`` and ``sample``."""
        self._check_batch(batch)
        if sample < 0 or member < 0:
            raise ClientConfigError(f"sample and member must be at least 0, got sample={sample} member={member}")
        inf = _inference(inference, weight_version, max_sampled_tokens, "inference")
        spec = _spec(_to_instance(instance, 0), inf, agent, mode, reward, sandbox)
        await _check_issue_images([spec], [])
        await _check_tokenizers([spec], [])
        body = self._body(
            batch,
            sample,
            member,
            spec.instance.instance_id,
            _submit_wire(spec),
            _extra_labels(labels),
            _trainer_annotation(trainer_labels) if trainer_labels is not None else None,
        )
        if check_endpoint:
            await check_inference_endpoint(str(inf.endpoint))
        await self.check_cluster()
        await self._check_batch_object(batch)
        return (await self._apply([body]))[0]

    async def prepare(self, batch: str) -> None:
        """Make ``batch``'s rollouts prepared: one write, ``spec.suspend: true`` on its
        SWERolloutBatch (created if needed), before or after its members are submitted.
        A member suspended before its first run is prepared (pod, sandbox, tokenizer and
        first prompt ready; phase Prepared) and holds its pod for
        ``spec.sandbox.preparedTimeoutSeconds``; ``resume(batch)`` is the go. Needs the
        SWERolloutBatch CRD (ClientConfigError otherwise)."""
        self._check_batch(batch)
        await self.check_cluster()
        if not self._batch_crd:
            raise ClientConfigError(
                f"prepare({batch!r}) needs the {BATCH_PLURAL}.{GROUP} CRD, which the API server does not serve: "
                "install the current CRDs (kubectl apply --server-side -f crds/)"
            )
        await self._batches.set(batch, suspend=True)

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
                            return sorted(_name(o) for o in objects if prepared(o))
        except TimeoutError:
            raise WaitTimeout(
                f"batch {batch!r} was not prepared after {timeout} s; see `swerollout list --batch {batch}`"
            ) from None
        raise AssertionError("unreachable: _observe never ends on its own")

    @staticmethod
    def _check_batch(batch: str) -> None:
        try:
            check_batch_name(batch)
        except ValueError as exc:
            raise ClientConfigError(str(exc)) from None

    async def _check_batch_object(self, batch: str) -> None:
        """Refuse to submit into a batch object left over from an earlier use of the name.

        A SWERolloutBatch outlives its rollouts. One that still suspends, or still sets a
        weight version, but has no members left would silently start the new members
        suspended (or label their tokens with the old version): refused, naming the fix.
        With members it is the trainer's live batch (submitting during a weight update is
        normal): the new members start suspended, with a warning, and ``resume(batch)``
        runs them. Read once per batch and client."""
        if not self._batch_crd or batch in self._batches_checked:
            return
        spec = await self._batches.get_if_allowed(batch)
        if spec is not None and (spec.suspend or spec.weight_version):
            what = "spec.suspend: true" if spec.suspend else f"spec.weightVersion: {spec.weight_version!r}"
            if not await self._has_members(batch):
                raise ClientConfigError(
                    f"SWERolloutBatch {batch} is left over from an earlier use of this batch name (it has "
                    f"{what} and no rollouts): delete it with `swerollout delete --batch {batch}` (or kubectl "
                    f"delete swerb {batch}), or choose a new batch name"
                )
            if spec.suspend:
                log.warning(
                    "batch %s is suspended: its new rollouts start suspended; resume(%r) (swerollout resume "
                    "--batch %s) runs them",
                    batch,
                    batch,
                    batch,
                )
        self._batches_checked.add(batch)

    async def _apply(self, bodies: list[Object]) -> list[str]:
        limit = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def apply(body: Object) -> str:
            async with limit:
                try:
                    await self.kube.apply(SWEROLLOUTS, body, self.namespace, field_manager=FIELD_MANAGER)
                except Invalid as exc:
                    hint = (
                        " This batch name was used before with other instances or another mode: choose a new "
                        "batch name."
                        if "immutable" in str(exc)
                        else ""
                    )
                    raise ClientConfigError(f"the API server refused {body['metadata']['name']}: {exc}.{hint}") from exc
                except KubeError as exc:
                    raise _kube_error(exc, f"creating SWERollout {body['metadata']['name']}") from exc
            return str(body["metadata"]["name"])

        return list(await asyncio.gather(*(apply(b) for b in bodies)))

    def _body(
        self,
        batch: str,
        sample: int,
        member: int,
        instance_id: str,
        spec: Object,
        labels: Mapping[str, str],
        trainer_annotation: str | None = None,
        *,
        group_size: int | None = None,
    ) -> Object:
        try:
            name = rollout_name(batch, sample, member)
        except ValueError as exc:
            raise ClientConfigError(str(exc)) from None
        annotations = {ANNOTATION_INSTANCE_ID: instance_id}
        if trainer_annotation is not None:
            annotations[ANNOTATION_TRAINER_LABELS] = trainer_annotation
        identity = {LABEL_BATCH: batch, LABEL_SAMPLE: str(sample), LABEL_MEMBER: str(member)}
        if group_size is not None:
            # The whole group is known here (submit_batch): under Kueue its pods are one pod group.
            identity[LABEL_GROUP_SIZE] = str(group_size)
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {**labels, **identity},
                "annotations": annotations,
            },
            "spec": spec,
        }

    # --- abort / resume ---------------------------------------------------------------

    async def abort(
        self,
        batch: str | None = None,
        *,
        names: Iterable[str] | None = None,
        inference: bool | None = None,
        admin_key: str | None = None,
    ) -> list[str]:
        """Stop generation now and suspend every unfinished member of ``batch`` (or each
        rollout in ``names``), keeping its pod; returns the names that were not suspended
        before.

        With ``inference`` (the default for a batch), also the inference side, so the
        GPUs are free at once: one ``/abort_request`` (``abort_all``) per inference server
        the rollouts use. SGLang matches abort rids exactly, so a batch cannot be aborted
        by a rid prefix; rollouts of other batches on the same server are not suspended by
        it: their runners re-sample the turn.

        A batch is suspended, at the same time, with ONE write: ``spec.suspend: true`` on its
        SWERolloutBatch (created if needed), which suspends every member, those created
        later included; the operator tells every runner at once, and each aborts its own
        request by its exact rid. ``names`` set each rollout's own ``spec.suspend``
        (concurrent patches); the default there is to only mark, so other rollouts on the
        same server lose nothing.

        ``admin_key``: the servers' admin key (SGLang's ``--admin-api-key``, or its
        ``--api-key`` when it has no admin key), sent as ``Authorization: Bearer`` on
        ``/abort_request``; defaults to the client's ``inference_admin_key``, else
        ``$SWEROLLOUT_INFERENCE_ADMIN_KEY``. A server that refuses the abort (401) is
        logged; the runners still abort their own requests with the keys their specs name.
        """
        key = admin_key or self._inference_admin_key
        stop_inference = inference if inference is not None else batch is not None
        if batch is not None and names is None and await self._batch_write_serves(batch):
            # The one write first, at once: reading 500 members takes seconds on a busy API
            # server, and every runner waits for the write, not for that list. The list (for
            # the servers to abort and the names to return) and the servers' aborts go on
            # at the same time; a slow or unreachable server only delays our return.
            async def listed() -> list[Object]:
                members = await self.list_rollouts(batch)
                if stop_inference:
                    await self._abort_inference(members, key)
                return members

            before, members = await _both(self._batches.set(batch, suspend=True), listed())
            if before is not None and before.suspend:
                return []
            return sorted(_name(o) for o in members if _unfinished(o) and not _own_suspend(o))
        members = await self._targets(batch, names)
        marking = self._set_suspend(members, True)
        if not stop_inference:
            return await marking
        marked, _ = await _both(marking, self._abort_inference(members, key))
        return marked

    async def _batch_write_serves(self, batch: str) -> bool:
        """Whether abort/resume of `batch` is one write to its SWERolloutBatch (the CRD is
        served); UnknownBatch when it has no members. One small read, not the member list."""
        await self.check_cluster()
        if not await self._has_members(batch):
            raise self._unknown_batch(batch)
        return self._served_batches()

    async def _has_members(self, batch: str) -> bool:
        """Whether any SWERollout carries the batch's label: one small read (limit=1)."""
        try:
            page = await aretry(
                lambda: self.kube.list(SWEROLLOUTS, self.namespace, label_selector=f"{LABEL_BATCH}={batch}", limit=1)
            )
        except KubeError as exc:
            raise _kube_error(exc, f"listing the members of batch {batch}") from exc
        return bool(page.get("items"))

    async def resume(
        self, batch: str | None = None, *, names: Iterable[str] | None = None, weight_version: str | None = None
    ) -> list[str]:
        """Let every unfinished member of ``batch`` (or each rollout in ``names``) continue
        on its pod; returns the names that were suspended before.

        The mirror image of :meth:`abort`: for a batch, one write (``spec.suspend: false``
        on its SWERolloutBatch), plus clearing the own ``spec.suspend`` of members that
        were suspended by name. ``weight_version`` goes into the same write
        (the batch's ``spec.weightVersion``, or each named rollout's
        ``spec.inference.weightVersion``), so the resumed runs label their tokens with it
        where the server reports no version.

        Resuming by name a member of a suspended batch works: the batch's other unfinished
        members are first suspended by name, then the batch object is resumed, so they
        stay suspended throughout. An ``/abort_request`` leaves a server accepting
        requests, so there is nothing to undo there (a trainer that paused a server with
        ``/pause_generation`` continues it)."""
        if weight_version is not None and not 0 < len(weight_version) <= MAX_WEIGHT_VERSION:
            raise ClientConfigError(
                f"weight_version must be 1 to {MAX_WEIGHT_VERSION} characters, got {len(weight_version)}"
            )
        if batch is not None and names is None and await self._batch_write_serves(batch):
            # As abort(batch): the one write does not wait for the member list.
            before, members = await _both(
                self._batches.set(batch, suspend=False, weight_version=weight_version), self.list_rollouts(batch)
            )
            cleared = await self._set_suspend([o for o in members if _own_suspend(o)], False)
            if before is not None and before.suspend:
                return sorted(_name(o) for o in members if _unfinished(o))
            return cleared
        members = await self._targets(batch, names)
        if batch is not None or not self._served_batches():  # a batch here: its CRD is not served
            return await self._set_suspend(members, False, weight_version=weight_version)
        split = await self._resume_out_of_batches(members, weight_version)
        cleared = await self._set_suspend(members, False, weight_version=weight_version)
        return sorted(set(cleared) | split)

    def _served_batches(self) -> bool:
        if not self._batch_crd:
            log.warning(
                "the API server does not serve %s.%s: suspending each rollout with its own patch; install the "
                "current CRDs (kubectl apply --server-side -f crds/) for batch-wide abort/resume in one write",
                BATCH_PLURAL,
                GROUP,
            )
        return self._batch_crd

    async def _resume_out_of_batches(self, members: list[Object], weight_version: str | None) -> set[str]:
        """Take named members out of their suspended batches (see :meth:`resume`); returns
        the names whose batch suspended them."""
        wanted = {_name(o) for o in members}
        by_batch: dict[str, list[str]] = {}
        for obj in members:
            owner = batch_name((obj.get("metadata") or {}).get("labels"))
            if owner and _unfinished(obj):
                by_batch.setdefault(owner, []).append(_name(obj))
        freed: set[str] = set()
        for owner, named in sorted(by_batch.items()):
            spec = await self._batches.get_if_allowed(owner)
            if spec is None:
                continue
            if weight_version is not None and spec.weight_version and spec.weight_version != weight_version:
                raise ClientConfigError(
                    f"SWERolloutBatch {owner} sets spec.weightVersion={spec.weight_version!r}, which wins over "
                    f"{named[0]}'s own; resume the whole batch with resume({owner!r}, weight_version=...) instead"
                )
            if not spec.suspend:
                continue
            rest = [o for o in await self.members(owner) if _name(o) not in wanted and not _own_suspend(o)]
            await self._set_suspend(rest, True)
            await self._batches.set(owner, suspend=False)
            freed.update(named)
        return freed

    async def delete(self, names: Iterable[str]) -> list[str]:
        """Delete these rollouts (samples the trainer dropped), with their pods and stored
        results; returns the names that existed. Deleting what is gone already is no error."""
        limit = asyncio.Semaphore(MARK_PARALLEL_REQUESTS)

        async def one(name: str) -> str:
            async with limit:
                try:
                    await self.kube.delete(SWEROLLOUTS, name, self.namespace, propagation_policy="Background")
                except NotFound:
                    return ""
                except KubeError as exc:
                    raise _kube_error(exc, f"deleting SWERollout {name}") from exc
            return name

        await self.check_cluster()
        deleted = await asyncio.gather(*(one(n) for n in sorted(set(names))))
        return [n for n in deleted if n]

    async def delete_batch(self, batch: str) -> list[str]:
        """Delete every rollout of ``batch`` (pods and stored results go with them), then
        its SWERolloutBatch object, so the name can be used again; returns the rollouts'
        names. UnknownBatch when there is neither a rollout nor a batch object.

        The members go first: a batch object deleted first would resume its suspended
        members until their own deletion reaches them. Deleting only the batch object
        (``kubectl delete swerb``) never deletes rollouts: they are the training data."""
        await self.check_cluster()
        names = [_name(o) for o in await self.list_rollouts(batch)]
        deleted = await self.delete(names) if names else []
        had_object = await self._batches.delete(batch) if self._batch_crd else False
        self._batches_checked.discard(batch)
        if not names and not had_object:
            raise self._unknown_batch(batch)
        return deleted

    async def _targets(self, batch: str | None, names: Iterable[str] | None) -> list[Object]:
        """The objects one abort/resume acts on: a batch's members, or named rollouts."""
        if (batch is None) == (names is None):
            raise ClientConfigError("pass either a batch or names=[...] (exactly one of them)")
        if batch is not None:
            return await self.members(batch)
        wanted = sorted(set(names or ()))
        limit = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def one(name: str) -> Object:
            async with limit:
                return await self.get_rollout(name)

        return list(await asyncio.gather(*(one(n) for n in wanted)))

    async def _abort_inference(self, members: list[Object], admin_key: str | None) -> None:
        endpoints = sorted(
            {
                str(((o.get("spec") or {}).get("inference") or {}).get("endpoint") or "").rstrip("/")
                for o in members
                if not parse_status(o).phase.is_terminal
            }
            - {""}
        )

        headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}

        async def one(endpoint: str) -> None:
            # Every engine behind the endpoint: a gateway (smg) serves no /abort_request itself.
            async with httpx.AsyncClient(timeout=INFERENCE_ABORT_TIMEOUT) as http:
                answers = await fleet.abort_all(http, endpoint, headers=headers, timeout=INFERENCE_ABORT_TIMEOUT)
            for answer in answers:
                if answer.status in (401, 403):
                    log.warning(
                        "%s/abort_request refused the abort (HTTP %d): pass admin_key= or set %s to the server's "
                        "admin key; the runners abort their own requests",
                        answer.engine,
                        answer.status,
                        INFERENCE_ADMIN_KEY_ENV,
                    )
                elif not answer.ok:
                    # Best effort: each runner still aborts its own request when it sees its mark.
                    log.warning(
                        "abort_request to %s failed (%s); the runners abort their own requests",
                        answer.engine,
                        answer.error or answer.status,
                    )

        await asyncio.gather(*(one(e) for e in endpoints))

    async def _set_suspend(
        self, members: list[Object], suspend: bool, *, weight_version: str | None = None
    ) -> list[str]:
        limit = asyncio.Semaphore(MARK_PARALLEL_REQUESTS)
        doing = f"setting spec.suspend={suspend}"

        async def patch(obj: Object) -> str:
            name = str(obj["metadata"]["name"])
            schedule = MARK_BACKOFF.start()
            # A patch whose answer was lost (reset, 5xx) may have been applied: then the
            # re-read shows the mark, and it is ours; it is never sent a second time.
            maybe_applied = False
            conflicts = 0
            async with limit:
                while conflicts < MAX_CONFLICT_RETRIES:
                    phase = parse_status(obj).phase
                    if phase.is_terminal:
                        return ""
                    if bool((obj.get("spec") or {}).get("suspend")) == suspend:
                        return name if maybe_applied else ""
                    # Conditional on the phase we read (not on the resourceVersion, which the
                    # operator's progress writes move all the time): a member that finished
                    # since we read it is re-read and left alone instead of being marked.
                    if (obj.get("status") or {}).get("phase"):
                        test: Object = {"op": "test", "path": "/status/phase", "value": phase.value}
                    else:  # never reconciled yet: any change at all means read again
                        rv = obj["metadata"]["resourceVersion"]
                        test = {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
                    body: list[Object] = [test, {"op": "add", "path": "/spec/suspend", "value": suspend}]
                    if weight_version is not None:
                        body.append({"op": "add", "path": "/spec/inference/weightVersion", "value": weight_version})
                    try:
                        await self.kube.patch(
                            SWEROLLOUTS, name, body, self.namespace, patch_type="json", field_manager=FIELD_MANAGER
                        )
                        return name
                    except (Conflict, Invalid):
                        conflicts += 1  # the phase moved (a failed `test` is 422): read it again
                    except NotFound:
                        return ""  # deleted meanwhile: nothing to abort or resume
                    except KubeError as exc:
                        delay = schedule.next_delay(exc.retry_after_seconds) if exc.retryable else None
                        if delay is None:
                            raise _kube_error(exc, f"{doing} on {name}") from exc
                        # 429 was refused before it ran; a reset or a 5xx may have landed.
                        maybe_applied = maybe_applied or exc.status != 429
                        log.info("%s on %s failed (%s); reading it again in %.1f s", doing, name, exc, delay)
                        await asyncio.sleep(delay)
                    try:
                        obj = await aretry(
                            lambda: self.kube.get(SWEROLLOUTS, name, self.namespace), policy=MARK_BACKOFF
                        )
                    except NotFound:
                        return ""
                    except KubeError as exc:
                        raise _kube_error(exc, f"reading {name} again while {doing}") from exc
            raise KubeApiError(f"{name} kept changing while {doing}; try again", retryable=True)

        names = await asyncio.gather(*(patch(o) for o in members))
        return sorted(n for n in names if n)

    # --- following a batch --------------------------------------------------------------

    async def _observe(self, batch: str) -> AsyncGenerator[list[Object], None]:
        """The batch's members now, then again after every change (see watch.list_and_watch)."""
        await self.check_cluster()
        items: dict[str, Object] = {}
        try:
            async with aclosing(list_and_watch(self.kube, self.namespace, f"{LABEL_BATCH}={batch}")) as changes:
                async for change in changes:
                    if isinstance(change, Listed):
                        items = dict(change.items)
                        if not items:
                            raise self._unknown_batch(batch)
                    elif change.deleted:
                        items.pop(change.name, None)
                        if not items:
                            raise UnknownBatch(f"every member of batch {batch!r} was deleted while following it")
                    else:
                        items[change.name] = change.obj
                    yield list(items.values())
        except KubeError as exc:
            raise _kube_error(exc, f"watching batch {batch}") from exc

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
            raise _kube_error(exc, "watching SWERollouts") from exc

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

    # --- trajectories -------------------------------------------------------------------

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
