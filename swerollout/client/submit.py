"""Submitting rollouts: validate the specs, refuse what would fail every rollout, apply them;
deleting them again (a trainer's dropped samples, a batch name to reuse)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx
from pydantic import ValidationError

from swerollout.api.base import one_line
from swerollout.api.shards import LABEL_SHARD, shard_label
from swerollout.api.v1alpha1 import (
    API_VERSION,
    BATCH_PLURAL,
    GROUP,
    KIND,
    LABEL_BATCH,
    LABEL_GROUP_SIZE,
    LABEL_MEMBER,
    LABEL_SAMPLE,
    Agent,
    AgentKind,
    Inference,
    Instance,
    Mode,
    Reward,
    SandboxSpec,
    SWERolloutSpec,
)
from swerollout.client.core import (
    FIELD_MANAGER,
    MARK_PARALLEL_REQUESTS,
    PARALLEL_REQUESTS,
    ClientCore,
    Object,
    kube_error,
    log,
    name_of,
)
from swerollout.client.errors import ClientConfigError, EndpointUnreachable
from swerollout.client.naming import check_batch_name, rollout_name
from swerollout.client.records import ANNOTATION_INSTANCE_ID, ANNOTATION_TRAINER_LABELS
from swerollout.instances import InstanceError, SWEBenchInstance, instance_from_row, to_api_instance
from swerollout.issue_images import spec_problem
from swerollout.kube import SWEROLLOUTS, Invalid, KubeError, NotFound
from swerollout.tokenizer_check import ordinary_text_problem

RESERVED_LABELS = (LABEL_BATCH, LABEL_MEMBER, LABEL_SAMPLE, LABEL_GROUP_SIZE, LABEL_SHARD)
InstanceLike = Instance | SWEBenchInstance | Mapping[str, Any]
TrainerLabel = str | int | float | bool | None


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


def _submit_wire(spec: SWERolloutSpec) -> Object:
    # spec.suspend is left out so a re-submit never resumes an aborted member.
    wire = spec.to_wire()
    wire.pop("suspend", None)
    return wire


class Submitting(ClientCore):
    """submit_batch, submit_one, prepare, delete and delete_batch of the client."""

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
        group_size: int | None = None,
    ) -> str:
        """Create one SWERollout ``<batch>-<sample>-<member>`` (for per-sample trainer hooks);
        returns its name. Same fields and idempotence as :meth:`submit_batch`; wait for it
        with :meth:`result`. Members of one GRPO group share ``batch`` and ``sample``.

        ``group_size``: how many members the group has, when the hook knows it. Under Kueue
        the group's pods are then one pod group, admitted whole as with :meth:`submit_batch`;
        without it each member is admitted on its own."""
        self._check_batch(batch)
        if sample < 0 or member < 0:
            raise ClientConfigError(f"sample and member must be at least 0, got sample={sample} member={member}")
        if group_size is not None and not 0 <= member < group_size:
            raise ClientConfigError(
                f"group_size must be greater than member (members are numbered 0 to group_size - 1), "
                f"got member={member} group_size={group_size}"
            )
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
            group_size=group_size,
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
                    raise kube_error(exc, f"creating SWERollout {body['metadata']['name']}") from exc
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
        identity = {
            LABEL_BATCH: batch,
            LABEL_SAMPLE: str(sample),
            LABEL_MEMBER: str(member),
            # Its operator shard (swerollout.api.shards): a sharded operator's replicas watch by it.
            LABEL_SHARD: shard_label(self.namespace, name),
        }
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
                    raise kube_error(exc, f"deleting SWERollout {name}") from exc
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
        names = [name_of(o) for o in await self.list_rollouts(batch)]
        deleted = await self.delete(names) if names else []
        had_object = await self._batches.delete(batch) if self._batch_crd else False
        self._batches_checked.discard(batch)
        if not names and not had_object:
            raise self._unknown_batch(batch)
        return deleted
