"""End to end: the agent loop + RLTokenModel + the policy server's oracle solve every bundled task.

Real parts only: swerex-remote serving each materialized task repository, the
SGLang-compatible policy server (oracle policy) over HTTP, the Qwen2.5 tokenizer.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agent_runner.agent.config import AgentConfig
from agent_runner.agent.loop import AgentLoop, LoopState, TaskInfo
from agent_runner.agent.tools import tool_schemas
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from agent_runner.sandbox import Sandbox
from swerollout.api import v1alpha1
from swerollout.exit_status import ExitStatus
from swerollout.instances import SWEBenchInstance
from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server.launch import PolicyServerHandle, launch
from swerollout_dev.tasks import materialize_tasks
from tests.support.repo_helpers import SharedServer, git

TOKENIZER = "qwen-2.5"


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> list[SWEBenchInstance]:
    return materialize_tasks(tmp_path_factory.mktemp("tasks"))


@pytest.fixture(scope="module")
def oracle(instances: list[SWEBenchInstance], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServerHandle]:
    tasks = tmp_path_factory.mktemp("oracle") / "tasks.jsonl"
    tasks.write_text("".join(i.model_dump_json() + "\n" for i in instances))
    server = launch("oracle", tasks=tasks, tokenizer=TOKENIZER)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def sglang(oracle: PolicyServerHandle) -> AsyncIterator[SGLangClient]:
    async with SGLangClient(oracle.url) as client:
        yield client


def make_model(client: SGLangClient, config: AgentConfig) -> RLTokenModel:
    text_format = config.tools.action_format.value == "text_bash"
    return RLTokenModel(
        load_tokenizer(TOKENIZER),
        client,
        sampling=SamplingParams(max_new_tokens=2048, temperature=0.0),
        max_context_tokens=32768,
        run_uid=uuid.uuid4().hex[:12],
        tools=None if text_format else tool_schemas(config.tools.enabled),
        tool_call_format=None if text_format else "auto",
    )


def task_of(instance: SWEBenchInstance) -> TaskInfo:
    return TaskInfo(
        problem_statement=instance.problem_statement,
        working_dir=instance.image.removeprefix("file://"),
        base_commit=instance.base_commit,
        repo=instance.repo,
        instance_id=instance.instance_id,
    )


def changed_lines(patch: str) -> list[str]:
    return [line for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


async def run_task(
    shared: SharedServer, client: SGLangClient, instance: SWEBenchInstance, kind: v1alpha1.AgentKind
) -> tuple[str | None, str | None, RLTokenModel]:
    config = AgentConfig.default(kind)
    model = make_model(client, config)
    sandbox = await Sandbox.connect(shared.handle.url, shared.handle.token, session=f"e2e-{uuid.uuid4().hex[:6]}")
    try:
        result = await AgentLoop(model, sandbox, config, task_of(instance)).run()
    finally:
        await sandbox.close(close_session=True)
    return result.exit_status, result.submission, model


async def test_oracle_solves_every_bundled_task(
    shared_server: SharedServer, sglang: SGLangClient, instances: list[SWEBenchInstance]
) -> None:
    assert len(instances) >= 5
    for instance in instances:
        status, submission, model = await run_task(shared_server, sglang, instance, v1alpha1.AgentKind.RL_TOKEN_AGENT)
        assert status == ExitStatus.SUBMITTED.value, instance.instance_id
        assert changed_lines(submission or "") == changed_lines(instance.patch), instance.instance_id
        trajectory = model.trajectory(exit_status=status, submission=submission or "")
        assert trajectory.turns == 2
        assert len(trajectory.response_ids) == len(trajectory.loss_mask) == len(trajectory.logprobs)
        assert 0 < sum(trajectory.loss_mask) < len(trajectory.loss_mask)


async def test_text_bash_agent_through_rl_token_model(
    shared_server: SharedServer, sglang: SGLangClient, instances: list[SWEBenchInstance]
) -> None:
    instance = instances[0]
    repo = Path(instance.image.removeprefix("file://"))
    git(repo, "reset", "-q", "--hard", instance.base_commit)
    git(repo, "clean", "-q", "-fdx")
    status, submission, model = await run_task(shared_server, sglang, instance, v1alpha1.AgentKind.TEXT_BASH_AGENT)
    assert status == "submitted"
    assert changed_lines(submission or "") == changed_lines(instance.patch)
    assert model.messages[-1]["content"].rstrip().endswith("```bash\nsubmit\n```")


async def test_abort_snapshot_and_resume_with_the_real_model(
    shared_server: SharedServer, sglang: SGLangClient, instances: list[SWEBenchInstance], oracle: PolicyServerHandle
) -> None:
    instance = instances[1]
    repo = Path(instance.image.removeprefix("file://"))
    git(repo, "reset", "-q", "--hard", instance.base_commit)
    git(repo, "clean", "-q", "-fdx")
    config = AgentConfig.default()
    sandbox = await Sandbox.connect(shared_server.handle.url, shared_server.handle.token, session="e2e-abort")
    try:
        model = make_model(sglang, config)
        httpx.post(f"{oracle.url}/_standin/faults", json={"abort_after_tokens": 3}).raise_for_status()
        try:
            partial = await AgentLoop(model, sandbox, config, task_of(instance)).run()
        finally:
            httpx.post(f"{oracle.url}/_standin/faults", json={"clear_abort_after_tokens": True}).raise_for_status()
        assert partial.partial and partial.exit_status is None
        assert partial.state.turns == 0 and partial.state.started
        blob = model.snapshot(agent_state=partial.state.model_dump(mode="json"))

        restored, agent_state = RLTokenModel.restore(
            blob,
            load_tokenizer(TOKENIZER),
            sglang,
            sampling=SamplingParams(max_new_tokens=2048, temperature=0.0),
            max_context_tokens=32768,
            run_uid=model.run_uid,
            tools=tool_schemas(config.tools.enabled),
        )
        loop = AgentLoop(restored, sandbox, config, task_of(instance))
        result = await loop.resume(LoopState.model_validate(agent_state))
    finally:
        await sandbox.close(close_session=True)
    assert result.exit_status == "submitted"
    assert changed_lines(result.submission or "") == changed_lines(instance.patch)
    assert [m["role"] for m in restored.messages].count("system") == 1
    assert restored.state.dropped_total > 0
