"""slime hooks: a custom generate function and a rollout function for whole groups.

slime (github.com/THUDM/slime) calls

- ``--custom-generate-function-path``: ``async generate(args, sample, sampling_params)``
  once per sample; here one call runs one whole agentic rollout on the cluster;
- ``--rollout-function-path``: ``generate_rollout(args, rollout_id, data_source,
  evaluation=False)`` once per step; here the step's groups run concurrently and, with
  ``--partial-rollout``, the groups still running when enough are done are suspended
  (their pods keep the sandbox) and go back to slime's buffer; the next step resumes
  them by name.

Settings: the shared :class:`~swerollout.trainers._settings.AdapterSettings`, from
``args.swerollout`` (a ``swerollout:`` section of the YAML slime reads with
``--custom-config-path``); the endpoint defaults to slime's router, the tokenizer to
``--hf-checkpoint``. slime's own arguments map onto the spec: ``--rollout-temperature``/
``--rollout-top-p``/``--rollout-top-k`` onto the sampling, ``--rollout-max-response-len``
onto ``maxSampledTokens``, ``--rollout-max-context-len`` onto ``maxContextTokens``;
groups have ``--n-samples-per-prompt`` members.

A sample's rollout is ``<batch_prefix>-<run id>-<group_index>-<index>`` (slime numbers
both across the whole run), so a sample that comes back from the buffer finds its
rollout again. The SWE-bench task is the sample's metadata (slime's ``--metadata-key``
column): its ``instance`` key, or the metadata itself when it is a published SWE-bench row.

Mapping of one finished record onto slime's ``Sample``: ``tokens`` = prompt + response,
``response_length``, ``loss_mask`` and ``rollout_log_probs`` of length
``response_length``, ``weight_versions`` one entry per ``/generate`` call whose tokens
are in the sample (SGLang's ``"default"`` where the server reported none),
``rollout_routed_experts`` ``[len(tokens) - 1, layers, top_k]`` (``top_k`` from
``args.moe_router_topk``), ``reward``, ``status`` (completed / truncated / aborted /
failed by name; a FAILED sample also gets ``remove_sample``), and ``metadata`` (the
rollout's name, exit status, resolved, turns, trainer labels).

slime is not imported: the functions work on the ``Sample`` objects slime hands them
(``type(sample).Status`` is slime's enum). The page: docs/trainers-slime.md.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swerollout.client import AsyncRolloutClient, ClientConfigError, RolloutRecord, TrainerStatus, rollout_name
from swerollout.portal import Portal
from swerollout.trainers._records import TrainerAdapterError, reward_of, sampling_from, token_arrays
from swerollout.trainers._settings import AdapterSettings, instance_from_row, shared_client

# What SGLang reports as the weight version of a server that was never given one.
UNSET_VERSION = "default"
# metadata keys this adapter writes on a sample.
META_ROLLOUT = "swerollout_rollout"
SETTINGS_KEY = "swerollout"
"""slime's ``args`` attribute holding the settings: the ``swerollout:`` mapping of the
YAML given to ``--custom-config-path`` (slime sets each top-level key on ``args``)."""


def settings_from_slime(args: Any) -> AdapterSettings:
    """The adapter settings from slime's ``args``: ``args.swerollout`` (from the
    ``--custom-config-path`` YAML), the endpoint defaulting to slime's router
    (``--sglang-router-ip``/``--sglang-router-port``) and the tokenizer to ``--hf-checkpoint``."""
    section = getattr(args, SETTINGS_KEY, None)
    if section is not None and not isinstance(section, Mapping):
        raise ClientConfigError(
            f"args.{SETTINGS_KEY} is a {type(section).__name__}; in the --custom-config-path YAML, "
            f"`{SETTINGS_KEY}:` must be a mapping (endpoints, tokenizer, namespace, store_url, ...)"
        )
    raw: dict[str, Any] = {str(k): v for k, v in (section or {}).items()}
    router = getattr(args, "sglang_router_ip", None)
    if "endpoints" not in raw and router:
        raw["endpoints"] = [f"http://{router}:{args.sglang_router_port}"]
    if "tokenizer" not in raw and getattr(args, "hf_checkpoint", None):
        raw["tokenizer"] = str(args.hf_checkpoint)
    return AdapterSettings.parse(raw, f"the `{SETTINGS_KEY}:` section of slime's --custom-config-path YAML")


@dataclass
class SlimeAdapter:
    """The hooks' configuration: the shared adapter settings (the cluster, the result store,
    the policy servers as the rollout pods reach them, the spec around each task)."""

    settings: AdapterSettings
    client: AsyncRolloutClient | None = None
    """None: the process's shared client of the running event loop (one watch for all samples)."""
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    """Keeps this run's rollout names apart from an earlier run's with the same prefix."""
    _portal: Portal[AsyncRolloutClient] | None = field(default=None, init=False, repr=False)
    _owns_client: bool = field(default=False, init=False, repr=False)

    @classmethod
    def from_args(cls, args: Any) -> SlimeAdapter:
        return cls(settings_from_slime(args))

    @property
    def batch(self) -> str:
        """The batch every rollout of this run belongs to: ``<batch_prefix>-<run id>``."""
        return self.settings.batch_name(self.run_id)

    def _client(self) -> AsyncRolloutClient:
        return self.client if self.client is not None else shared_client(self.settings)

    def name_of(self, sample: Any) -> str:
        if sample.group_index is None or sample.index is None:
            raise TrainerAdapterError(
                "a slime sample without group_index/index cannot be named; slime's data source sets both "
                "(a custom data source must set them too)"
            )
        return rollout_name(self.batch, int(sample.group_index), int(sample.index))

    def _instance(self, sample: Any) -> dict[str, Any]:
        try:
            return instance_from_row(sample.metadata or {})
        except ClientConfigError as exc:
            raise TrainerAdapterError(
                f"sample {sample.index}: its metadata (slime's --metadata-key column): {exc}"
            ) from exc

    async def generate(self, args: Any, sample: Any, sampling_params: Mapping[str, Any]) -> Any:
        """slime's custom generate function: run (or resume) the sample's rollout, wait for
        it, and fill the sample. A sample that already holds a finished result is returned
        as it is."""
        status = type(sample).Status
        name = (sample.metadata or {}).get(META_ROLLOUT)
        if name is not None and sample.status in (status.COMPLETED, status.TRUNCATED, status.FAILED):
            return sample
        client = self._client()
        if name is not None and sample.status is status.ABORTED:
            await client.resume(names=[name])
        else:
            name = await self.submit(args, sample, sampling_params)
        record = await client.result(name, timeout=self.settings.timeout_seconds)
        return fill_sample(sample, record, top_k=_top_k(args))

    async def submit(self, args: Any, sample: Any, sampling_params: Mapping[str, Any]) -> str:
        """Create the sample's rollout (idempotent) and note its name in the metadata.

        slime's ``max_new_tokens`` (``--rollout-max-response-len``) caps the tokens sampled
        over the whole rollout (``maxSampledTokens``), ``--rollout-max-context-len`` its
        context (``maxContextTokens``)."""
        self.name_of(sample)  # names the fix for a sample without group_index/index
        max_new = sampling_params.get("max_new_tokens") or getattr(args, "rollout_max_response_len", None)
        max_context = getattr(args, "rollout_max_context_len", None)
        settings = self.settings
        name = await self._client().submit_one(
            self._instance(sample),
            batch=self.batch,
            sample=int(sample.group_index),
            member=int(sample.index),
            inference=settings.inference_for(
                int(sample.index),
                sampling=sampling_from(dict(sampling_params)),
                max_sampled_tokens=int(max_new) if max_new else None,
                max_context_tokens=int(max_context) if max_context else None,
            ),
            agent=settings.agent or None,
            reward=settings.reward or None,
            sandbox=settings.sandbox or None,
            mode=settings.mode,
            trainer_labels={"group_index": int(sample.group_index), "index": int(sample.index)},
        )
        sample.metadata = {**(sample.metadata or {}), META_ROLLOUT: name}
        return name

    async def rollout_groups(
        self, args: Any, groups: Sequence[list[Any]], target: int
    ) -> tuple[list[list[Any]], list[list[Any]]]:
        """Run ``groups`` until ``target`` of them are whole (every member finished), then
        suspend the members still running. Returns (the first ``target`` whole groups in
        completion order, the other groups: members that were running marked ABORTED,
        finished ones filled, not started ones untouched)."""
        params = _sampling_params(args)
        tasks = [
            asyncio.ensure_future(asyncio.gather(*(self.generate(args, s, params) for s in group))) for group in groups
        ]
        position = {task: i for i, task in enumerate(tasks)}
        whole: list[int] = []
        pending = set(tasks)
        while pending and len(whole) < target:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=position.__getitem__):
                task.result()  # a broken sample fails the step loudly
                whole.append(position[task])
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        kept = whole[:target]
        left = [group for i, group in enumerate(groups) if i not in kept]
        final = {"COMPLETED", "TRUNCATED", "FAILED"}
        running = [
            s for group in left for s in group if (s.metadata or {}).get(META_ROLLOUT) and s.status.name not in final
        ]
        if running:
            await self._client().abort(names=[s.metadata[META_ROLLOUT] for s in running])
            for sample in running:
                sample.status = type(sample).Status.ABORTED
        return [groups[i] for i in kept], left

    def generate_rollout(
        self, args: Any, rollout_id: int, data_source: Any, evaluation: bool = False
    ) -> list[list[Any]]:
        """slime's rollout function: ``args.rollout_batch_size`` whole groups of
        ``args.n_samples_per_prompt`` samples per step.

        With ``args.partial_rollout`` it takes ``args.over_sampling_batch_size`` groups,
        returns the first ``rollout_batch_size`` that finish, and hands the others back
        to ``data_source.add_samples`` (their running members suspended, resumed by name
        when slime hands them out again). Without it, every group is waited for. The
        client runs on this adapter's own event loop (a portal thread), so the function
        may be called from slime's synchronous rollout manager step after step."""
        if evaluation:
            raise ClientConfigError(
                "swerollout.trainers.slime.generate_rollout does not run evaluations: set --eval-function-path "
                "slime.rollout.sglang_rollout.generate_rollout (with --custom-generate-function-path "
                "swerollout.trainers.slime.generate for SWE eval datasets)"
            )
        target = int(args.rollout_batch_size)
        partial = bool(getattr(args, "partial_rollout", False))
        take = max(target, int(getattr(args, "over_sampling_batch_size", None) or target)) if partial else target
        groups = data_source.get_samples(take)
        size = getattr(args, "n_samples_per_prompt", None)
        wrong = [len(g) for g in groups if size is not None and len(g) != int(size)]
        if wrong:
            raise ClientConfigError(
                f"the data source handed out groups of {sorted(set(wrong))} samples, not --n-samples-per-prompt={size}"
            )
        if self._portal is None:
            given, self._owns_client = self.client, self.client is None

            async def build() -> AsyncRolloutClient:
                return given if given is not None else self.settings.connect()

            async def aclose(client: AsyncRolloutClient) -> None:
                if given is None:
                    await client.aclose()

            self._portal = Portal(build, aclose)
            self.client = self._portal.inner
        finished: list[list[Any]]
        finished, left = self._portal.run(self.rollout_groups(args, groups, target if partial else len(groups)))
        if left:
            data_source.add_samples(left)
        return finished

    def close(self) -> None:
        """Stop the portal thread of :meth:`generate_rollout` (closing the client it opened)."""
        if self._portal is not None:
            self._portal.close()
            if self._owns_client:
                self.client, self._owns_client = None, False
            self._portal = None


def fill_sample(sample: Any, record: RolloutRecord, *, top_k: int | None = None) -> Any:
    """Write one record into a slime ``Sample`` (see the module doc for the mapping)."""
    status = type(sample).Status
    sample.metadata = {
        **(sample.metadata or {}),
        META_ROLLOUT: record.name,
        "exit_status": record.exit_status,
        "resolved": record.resolved,
        "turns": record.turns,
        "trainer_labels": record.trainer_labels,
    }
    if record.status is TrainerStatus.ABORTED:
        sample.status = status.ABORTED
        return sample
    sample.status = status(record.status.value)
    sample.remove_sample = record.status is TrainerStatus.FAILED
    sample.reward = reward_of(record)
    if record.prompt_ids.size == 0:  # failed before the first request: nothing to train on
        sample.remove_sample = True
        return sample
    arrays = token_arrays(record)
    sample.tokens = arrays.input_ids.tolist()
    sample.response_length = int(arrays.response_ids.size)
    sample.loss_mask = arrays.loss_mask.tolist()
    sample.rollout_log_probs = arrays.logprobs.astype(float).tolist()
    sample.weight_versions = weight_versions_per_call(record)
    sample.rollout_routed_experts = routed_experts(record, top_k)
    return sample


def weight_versions_per_call(record: RolloutRecord) -> list[str]:
    """One entry per ``/generate`` call whose tokens are in the record, in order (the
    runner's turn log); SGLang's ``"default"`` for a call without a version."""
    log = record.info.get("turn_log")
    if isinstance(log, list):
        return [str(t.get("weight_version") or UNSET_VERSION) for t in log if isinstance(t, dict) and t.get("kept")]
    # No turn log (an older runner): one entry per run of sampled tokens.
    versions: list[str] = []
    previous = 0
    for mask, version in zip(record.loss_mask.tolist(), record.weight_versions.tolist()):
        if mask and not previous:
            versions.append(str(version or UNSET_VERSION))
        previous = mask
    return versions


def routed_experts(record: RolloutRecord, top_k: int | None) -> np.ndarray[Any, np.dtype[np.int32]] | None:
    """``[len(tokens) - 1, layers, top_k]``: SGLang's rows, one per token the model read."""
    rows = record.routed_experts
    if rows is None:
        return None
    if not top_k:
        raise TrainerAdapterError(
            f"rollout {record.name} carries MoE routing but args.moe_router_topk is not set; set --moe-router-topk "
            "(or turn spec.inference.returnRoutedExperts off)"
        )
    width = rows.shape[1]
    if width % top_k:
        raise TrainerAdapterError(
            f"rollout {record.name}: a routing row holds {width} experts, not a multiple of --moe-router-topk={top_k}"
        )
    return np.ascontiguousarray(rows[:-1].reshape(rows.shape[0] - 1, width // top_k, top_k))


def _top_k(args: Any) -> int | None:
    value = getattr(args, "moe_router_topk", None)
    return int(value) if value else None


def _sampling_params(args: Any) -> dict[str, Any]:
    """What slime's own rollout passes to generate, from its arguments."""
    return {
        "temperature": getattr(args, "rollout_temperature", None),
        "top_p": getattr(args, "rollout_top_p", None),
        "top_k": getattr(args, "rollout_top_k", None),
        "max_new_tokens": getattr(args, "rollout_max_response_len", None),
    }


# --- the module-level hooks slime's flags point at ------------------------------------------

_ADAPTER: SlimeAdapter | None = None


def configure(adapter: SlimeAdapter) -> None:
    """Use ``adapter`` for the module-level :func:`generate` / :func:`generate_rollout`."""
    global _ADAPTER
    _ADAPTER = adapter


def _adapter(args: Any) -> SlimeAdapter:
    global _ADAPTER
    if _ADAPTER is None:
        _ADAPTER = SlimeAdapter.from_args(args)
    return _ADAPTER


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any]) -> Any:
    """``--custom-generate-function-path swerollout.trainers.slime.generate``."""
    return await _adapter(args).generate(args, sample, sampling_params)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> list[list[Any]]:
    """``--rollout-function-path swerollout.trainers.slime.generate_rollout``."""
    groups: list[list[Any]] = _adapter(args).generate_rollout(args, rollout_id, data_source, evaluation)
    return groups


def close() -> None:
    """Stop what :func:`generate_rollout` started (its thread and client); call it before
    the process exits (the thread would keep the interpreter waiting)."""
    if _ADAPTER is not None:
        _ADAPTER.close()
