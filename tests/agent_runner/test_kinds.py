"""The registry of agent kinds: every kind the API accepts has a run, and each run builds
the model its kind needs and carries its conversation across an abort."""

from __future__ import annotations

from typing import Any

import pytest

from agent_runner.agent.config import AgentConfig
from agent_runner.pod import kinds
from agent_runner.policy.chat_model import ChatModel
from agent_runner.policy.rl_model import RLTokenModel
from swerollout.api import v1alpha1 as api
from swerollout.wire.runner_env import InferenceKeys

INSTANCE: dict[str, Any] = {
    "instanceId": "demo__calc-1",
    "repo": "demo/calc",
    "baseCommit": "abcdef0",
    "image": "registry.example/calc:1",
    "problemStatement": "add() is wrong",
    "evaluation": {"failToPass": ["tests/test_calc.py::test_add"]},
}


def _spec(kind: api.AgentKind) -> api.SWERolloutSpec:
    inference: dict[str, Any] = {"endpoint": "http://127.0.0.1:9", "model": "m"}
    if kind is not api.AgentKind.CHAT_AGENT:
        inference["tokenizer"] = "qwen-2.5"
    return api.SWERolloutSpec.model_validate({"instance": INSTANCE, "inference": inference, "agent": {"kind": kind}})


def _build(spec: api.SWERolloutSpec, snapshot: bytes | None = None) -> tuple[kinds.KindRun, dict[str, Any]]:
    config = AgentConfig.from_spec(spec.agent)
    return kinds.build(spec, config, snapshot, keys=InferenceKeys(), routing_key="uid-1")


def test_every_agent_kind_of_the_api_has_a_run() -> None:
    assert set(kinds.KINDS) == set(api.AgentKind)


@pytest.mark.parametrize(
    ("kind", "model_type", "checkpointed"),
    [
        (api.AgentKind.RL_TOKEN_AGENT, RLTokenModel, True),
        (api.AgentKind.TEXT_BASH_AGENT, RLTokenModel, True),
        (api.AgentKind.CHAT_AGENT, ChatModel, False),
    ],
)
async def test_each_kind_builds_its_model(kind: api.AgentKind, model_type: type, checkpointed: bool) -> None:
    run, agent_state = _build(_spec(kind))
    assert isinstance(run.model, model_type) and agent_state == {}
    assert run.checkpointed is checkpointed
    assert (run.client is not None) is checkpointed  # the token kinds talk to SGLang's /generate
    if run.client is not None:
        await run.client.aclose()
    else:
        assert isinstance(run.model, ChatModel)
        await run.model.aclose()


async def test_a_chat_run_resumes_its_messages_and_agent_state_from_its_snapshot() -> None:
    spec = _spec(api.AgentKind.CHAT_AGENT)
    run, _ = _build(spec)
    conversation = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix add()."}]
    run.model.add_messages(conversation)
    blob, weight_version = run.snapshot({"loop": {"turns": 3}})
    assert weight_version is None  # a chat run labels no tokens
    resumed, agent_state = _build(spec, blob)
    assert resumed.model.messages == conversation
    assert agent_state == {"loop": {"turns": 3}}
    assert resumed.generated_tokens() == 0
    for model in (run.model, resumed.model):
        assert isinstance(model, ChatModel)
        await model.aclose()
