"""The agent kinds the runner knows, and what the session does differently for each.

`spec.agent.kind` picks one entry of `KINDS`; the entry builds the run's model (from a
snapshot on a resume) and answers every per-kind question the session has, so the
session never asks which model class it holds:

- token-tracking kinds (RLTokenAgent, TextBashAgent): an `RLTokenModel` on SGLang's
  /generate, budgeted inside the server's limits, checkpointed at every turn, snapshotted
  as token arrays, finished as a trajectory of exact tokens;
- ChatAgent: a `ChatModel` on /v1/chat/completions that keeps messages only, so its
  snapshot and its trajectory are the messages.

A new kind is one class here and one line in `KINDS`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from agent_runner.agent.config import ActionFormat, AgentConfig
from agent_runner.agent.tools.schemas import tool_schemas
from agent_runner.policy.chat_model import ChatModel, chat_model_from_spec
from agent_runner.policy.model import Model
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from swerollout.api import v1alpha1 as api
from swerollout.issue_images import IssueImageError, image_placeholder, text_only_message
from swerollout.runner_tokenizer import load_runner_tokenizer
from swerollout.tokenizer_check import require_ordinary_text
from swerollout.wire.codec import decode, encode
from swerollout.wire.runner_env import InferenceKeys

from .checkpoint import CheckpointWriter

log = logging.getLogger(__name__)
CHAT_SNAPSHOT_KIND = "chat-snapshot"


@dataclass(frozen=True)
class Finished:
    """What a finished run uploads as its trajectory, and the token counts it reports."""

    blob: bytes
    prompt_tokens: int = 0
    response_tokens: int = 0
    sampled_tokens: int = 0
    dropped_tokens: int = 0


class KindRun(Protocol):
    """One run's model with the behaviour of its agent kind."""

    @property
    def model(self) -> Model: ...

    @property
    def client(self) -> SGLangClient | None:
        """The SGLang client (its limits, its exact-rid aborts); None for kinds without one."""
        ...

    @property
    def checkpointed(self) -> bool:
        """Whether the run keeps a per-turn checkpoint chain (a lost pod replays from it)."""
        ...

    async def apply_server_limits(self) -> str:
        """Budget inside the server's own limits; what the trainer must be told ("" if nothing)."""
        ...

    def note(self, text: str) -> None:
        """Record a note that travels with the run's result."""
        ...

    def capture(self, checkpoints: CheckpointWriter, agent_state: dict[str, Any], *, turns: int) -> None:
        """Hand the turn's state to the checkpoint writer (checkpointed kinds only)."""
        ...

    def render_pending(self) -> None:
        """Build the first request ahead of the go (a prepare)."""
        ...

    def relabel(self, weight_version: str | None) -> None:
        """The weight version the go carries labels the tokens sampled from now on."""
        ...

    def snapshot(self, agent_state: dict[str, Any]) -> tuple[bytes, str | None]:
        """The aborted run as a snapshot blob, and the newest weight version its tokens carry."""
        ...

    def finished(self, *, exit_status: str, submission: str, error: str | None, elapsed: float) -> Finished: ...

    def generated_tokens(self) -> int:
        """Tokens the policy sampled so far (0 when the kind does not track tokens)."""
        ...


class TokenRun:
    """RLTokenAgent and TextBashAgent: exact tokens on SGLang's /generate."""

    checkpointed = True

    def __init__(self, model: RLTokenModel, client: SGLangClient) -> None:
        self._model = model
        self._client = client

    @property
    def model(self) -> Model:
        return self._model

    @property
    def client(self) -> SGLangClient | None:
        return self._client

    @classmethod
    def build(
        cls,
        spec: api.SWERolloutSpec,
        config: AgentConfig,
        snapshot: bytes | None,
        *,
        keys: InferenceKeys,
        routing_key: str,
    ) -> tuple[TokenRun, dict[str, Any]]:
        inference = spec.inference
        tokenizer = load_runner_tokenizer(inference.tokenizer or "")
        # Before any token is sent: a vocabulary that cannot spell a newline would record
        # <unk> where the agent saw text (the client refuses it at submit too, when it can tell).
        require_ordinary_text(tokenizer.backend_tokenizer, inference.tokenizer or "")
        images = spec.instance.issue_images if spec.agent.issue_image_mode == api.IssueImageMode.INLINE else []
        if images and image_placeholder(tokenizer) is None:
            # Never a silent drop: a text-only template fails the run before any token is sent.
            raise IssueImageError(text_only_message(inference.tokenizer or "", len(images)))
        client = SGLangClient(
            inference.endpoint,
            timeout=float(inference.request_timeout_seconds),
            api_key=keys.api_key,
            admin_key=keys.admin_key,
            # The rollout's uid: a gateway keeps all its turns, its resume and a replay on one engine.
            routing_key=routing_key,
        )
        function_calling = config.tools.action_format == ActionFormat.FUNCTION_CALLING
        kwargs: dict[str, Any] = dict(
            sampling=SamplingParams(
                max_new_tokens=inference.sampling.max_new_tokens,
                temperature=inference.sampling.temperature,
                top_p=inference.sampling.top_p,
                top_k=inference.sampling.top_k,
                stop=inference.sampling.stop or None,
                sampling_seed=inference.sampling.seed,
                skip_special_tokens=False,
            ),
            max_context_tokens=inference.max_context_tokens,
            max_sampled_tokens=inference.max_sampled_tokens,
            run_uid=routing_key,
            tools=tool_schemas([t.value for t in config.tools.enabled]) if function_calling else None,
            weight_version=inference.weight_version,
            tool_call_format="auto" if function_calling else None,
            return_routed_experts=inference.return_routed_experts,
            request_timeout=float(inference.request_timeout_seconds),
            keep_aborted=inference.on_abort is api.OnAbort.KEEP,
        )
        if snapshot is not None:
            model, agent_state = RLTokenModel.restore(snapshot, tokenizer, client, **kwargs)
            return cls(model, client), agent_state
        return cls(RLTokenModel(tokenizer, client, **kwargs), client), {}

    async def apply_server_limits(self) -> str:
        """A spec asking for more context than the server has gets the server's (smaller) limit."""
        model, client = self._model, self._client
        info = await client.server_info()
        limits = await client.limits()
        notes: list[str] = []
        if limits is not None:
            model.server_limits = limits
            if model.max_context_tokens > limits.context_length:
                notes.append(
                    f"spec.inference.maxContextTokens {model.max_context_tokens} exceeds the server's context "
                    f"length {limits.context_length}; using {limits.context_length}"
                )
                model.max_context_tokens = limits.context_length
        else:
            log.warning("the inference server reports no context limits; budgeting with maxContextTokens only")
        if model.return_routed_experts and info is not None and info.enable_return_routed_experts is False:
            notes.append(
                "spec.inference.returnRoutedExperts is set but the server runs without "
                "--enable-return-routed-experts: no routing rows will be stored"
            )
        for note in notes:
            if note not in model.state.notes:
                model.state.notes.append(note)
        return "; ".join(notes)

    def note(self, text: str) -> None:
        self._model.state.notes.append(text)

    def capture(self, checkpoints: CheckpointWriter, agent_state: dict[str, Any], *, turns: int) -> None:
        checkpoints.capture(self._model.state, self._model.buffer, agent_state, turns=turns)

    def render_pending(self) -> None:
        self._model.render_pending()

    def relabel(self, weight_version: str | None) -> None:
        self._model.weight_version = weight_version

    def snapshot(self, agent_state: dict[str, Any]) -> tuple[bytes, str | None]:
        model = self._model
        weight_version = next((v for v in reversed(model.buffer.weight_versions) if v is not None), None)
        return model.snapshot(agent_state=agent_state), weight_version

    def finished(self, *, exit_status: str, submission: str, error: str | None, elapsed: float) -> Finished:
        trajectory = self._model.trajectory(
            exit_status=exit_status,
            submission=submission,
            timings={"total_seconds": elapsed},
            info={"error": error} if error else None,
        )
        return Finished(
            blob=trajectory.to_bytes(),
            prompt_tokens=len(trajectory.prompt_ids),
            response_tokens=len(trajectory.response_ids),
            sampled_tokens=trajectory.sampled_tokens,
            dropped_tokens=self._model.state.dropped_total,
        )

    def generated_tokens(self) -> int:
        return self._model.state.sampled_total


class ChatRun:
    """ChatAgent: messages on an OpenAI-compatible server, no tokens to keep."""

    checkpointed = False

    def __init__(self, model: ChatModel) -> None:
        self._model = model

    @property
    def model(self) -> Model:
        return self._model

    @property
    def client(self) -> SGLangClient | None:
        return None

    @classmethod
    def build(
        cls,
        spec: api.SWERolloutSpec,
        config: AgentConfig,
        snapshot: bytes | None,
        *,
        keys: InferenceKeys,
        routing_key: str,
    ) -> tuple[ChatRun, dict[str, Any]]:
        chat = chat_model_from_spec(
            spec.inference, tools=tool_schemas([t.value for t in config.tools.enabled]), api_key=keys.api_key
        )
        agent_state: dict[str, Any] = {}
        if snapshot is not None:
            decoded = decode(snapshot, kind=CHAT_SNAPSHOT_KIND)
            chat.add_messages(list(decoded.meta["messages"]))
            agent_state = dict(decoded.meta["agent_state"])
        return cls(chat), agent_state

    async def apply_server_limits(self) -> str:
        return ""

    def note(self, text: str) -> None:
        pass  # a chat trajectory carries no notes

    def capture(self, checkpoints: CheckpointWriter, agent_state: dict[str, Any], *, turns: int) -> None:
        pass  # not checkpointed: a lost pod runs again from its last snapshot

    def render_pending(self) -> None:
        pass

    def relabel(self, weight_version: str | None) -> None:
        pass  # no tokens to label

    def snapshot(self, agent_state: dict[str, Any]) -> tuple[bytes, str | None]:
        return encode(CHAT_SNAPSHOT_KIND, {"messages": self._model.messages, "agent_state": agent_state}, {}), None

    def finished(self, *, exit_status: str, submission: str, error: str | None, elapsed: float) -> Finished:
        meta = {"messages": self._model.messages, "exit_status": exit_status, "submission": submission, "error": error}
        return Finished(blob=encode("chat-trajectory", meta, {}))

    def generated_tokens(self) -> int:
        return 0


class Builder(Protocol):
    """Builds a kind's run from the spec (resumed from a snapshot when given)."""

    def __call__(
        self,
        spec: api.SWERolloutSpec,
        config: AgentConfig,
        snapshot: bytes | None,
        *,
        keys: InferenceKeys,
        routing_key: str,
    ) -> tuple[KindRun, dict[str, Any]]: ...


KINDS: dict[api.AgentKind, Builder] = {
    api.AgentKind.RL_TOKEN_AGENT: TokenRun.build,
    api.AgentKind.TEXT_BASH_AGENT: TokenRun.build,
    api.AgentKind.CHAT_AGENT: ChatRun.build,
}


def build(
    spec: api.SWERolloutSpec, config: AgentConfig, snapshot: bytes | None, *, keys: InferenceKeys, routing_key: str
) -> tuple[KindRun, dict[str, Any]]:
    """The run of `spec.agent.kind` (resumed from `snapshot` when given) and the agent state it carried."""
    builder = KINDS.get(spec.agent.kind)
    if builder is None:
        known = ", ".join(k.value for k in KINDS)
        raise ValueError(f"spec.agent.kind {spec.agent.kind.value} is not known to this runner (it knows {known})")
    return builder(spec, config, snapshot, keys=keys, routing_key=routing_key)
