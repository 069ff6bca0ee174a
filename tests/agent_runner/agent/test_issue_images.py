"""Issue images reach the inference server: a SWE-bench Multimodal row, on both paths.

Real parts only: a Multimodal-shaped row through the dataset loader, a bundled task
repository served by swerex-remote, the SGLang stand-in (oracle policy) over HTTP with
a vision tokenizer, and its request log (GET /_standin/requests) as the witness that
the images arrived, in order.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_runner.agent.config import AgentConfig
from agent_runner.agent.loop import AgentLoop, TaskInfo
from agent_runner.agent.tools import tool_schemas
from agent_runner.policy.chat_model import ChatModel
from agent_runner.policy.errors import ChatTemplateError
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from agent_runner.sandbox import Sandbox
from swerollout.api import v1alpha1
from swerollout.instances import SWEBenchInstance, instance_from_row, to_api_instance
from swerollout.issue_images import image_placeholder
from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server.launch import PolicyServerHandle, launch
from swerollout_dev.tasks import materialize_tasks
from tests.support.image_bytes import data_url, png
from tests.support.published_rows import swebench_multimodal
from tests.support.repo_helpers import SharedServer, git

VISION_TOKENIZER = "glm-4.5v"


SCREENSHOT = png(56, 84)  # 2 x 3 tiles of 28 pixels: 6 image tokens on the stand-in
IMAGE_URLS = [
    "https://user-images.example/legend-before.png",
    data_url(SCREENSHOT),
]


@pytest.fixture(scope="module")
def multimodal(tmp_path_factory: pytest.TempPathFactory) -> SWEBenchInstance:
    """A bundled task, published as SWE-bench Multimodal publishes a row (image_assets a JSON string)."""
    task = materialize_tasks(tmp_path_factory.mktemp("tasks"))[0]
    row = swebench_multimodal()
    row.update(
        repo=task.repo,
        instance_id=task.instance_id,
        base_commit=task.base_commit,
        patch=task.patch,
        problem_statement=task.problem_statement,
        image=task.image,
        eval_script=task.eval_script,
        image_assets=json.dumps({"problem_statement": IMAGE_URLS, "patch": [], "test_patch": []}),
    )
    return instance_from_row(row)


@pytest.fixture(scope="module")
def server(multimodal: SWEBenchInstance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyServerHandle]:
    tasks = tmp_path_factory.mktemp("oracle") / "tasks.jsonl"
    tasks.write_text(multimodal.model_dump_json() + "\n")
    handle = launch("oracle", tasks=tasks, tokenizer=VISION_TOKENIZER)
    try:
        yield handle
    finally:
        handle.stop()


def task_info(instance: SWEBenchInstance, mode: v1alpha1.IssueImageMode = v1alpha1.IssueImageMode.INLINE) -> TaskInfo:
    api = to_api_instance(instance)
    return TaskInfo.from_instance(api, mode).model_copy(update={"working_dir": instance.image.removeprefix("file://")})


def requests_since(server: PolicyServerHandle, seen: int) -> list[dict[str, Any]]:
    log = httpx.get(f"{server.url}/_standin/requests").raise_for_status().json()["requests"]
    return list(log[seen:])


def sent_images(record: dict[str, Any]) -> list[str]:
    """The record's images as the test sent them (data URLs by the sha256 of their bytes)."""
    return [image["url"] or f"sha256:{image['sha256']}" for image in record["images"]]


EXPECTED = [IMAGE_URLS[0], f"sha256:{hashlib.sha256(SCREENSHOT).hexdigest()}"]


async def run(shared: SharedServer, model: Any, instance: SWEBenchInstance, kind: v1alpha1.AgentKind) -> str | None:
    repo = Path(instance.image.removeprefix("file://"))
    git(repo, "reset", "-q", "--hard", instance.base_commit)
    git(repo, "clean", "-q", "-fdx")
    sandbox = await Sandbox.connect(shared.handle.url, shared.handle.token, session=f"img-{uuid.uuid4().hex[:6]}")
    try:
        result = await AgentLoop(model, sandbox, AgentConfig.default(kind), task_info(instance)).run()
    finally:
        await sandbox.close(close_session=True)
    return result.exit_status


async def test_multimodal_row_images_reach_generate_in_order(
    shared_server: SharedServer, server: PolicyServerHandle, multimodal: SWEBenchInstance
) -> None:
    assert multimodal.issue_images == IMAGE_URLS
    seen = len(requests_since(server, 0))
    tokenizer = load_tokenizer(VISION_TOKENIZER)
    config = AgentConfig.default(v1alpha1.AgentKind.RL_TOKEN_AGENT)
    async with SGLangClient(server.url) as client:
        model = RLTokenModel(
            tokenizer,
            client,
            sampling=SamplingParams(max_new_tokens=2048, temperature=0.0),
            max_context_tokens=32768,
            run_uid=uuid.uuid4().hex[:12],
            tools=tool_schemas(config.tools.enabled),
        )
        status = await run(shared_server, model, multimodal, v1alpha1.AgentKind.RL_TOKEN_AGENT)
    assert status == "submitted"
    records = requests_since(server, seen)
    assert len(records) == 2 and {r["route"] for r in records} == {"generate"}
    # Every turn carries the images again (each /generate stands alone), in the issue's order.
    assert [sent_images(r) for r in records] == [EXPECTED, EXPECTED]
    assert [image["tokens"] for image in records[0]["images"]] == [64, 6]
    trajectory = model.trajectory(exit_status=status)
    placeholder = image_placeholder(tokenizer)
    assert placeholder is not None
    # One pad token per image in the list, in the prompt (loss mask covers the response only).
    assert trajectory.prompt_ids.count(placeholder.pad_id) == 2
    assert placeholder.pad_id not in trajectory.response_ids
    # The server read each placeholder expanded; the runner learnt by how much.
    assert records[0]["sent_tokens"] == len(trajectory.prompt_ids)
    assert records[0]["prompt_tokens"] == len(trajectory.prompt_ids) + 64 + 6 - 2
    assert trajectory.info["expanded_image_tokens"] == 64 + 6 - 2 and trajectory.info["images"] == 2


async def test_chat_agent_sends_image_url_parts(
    shared_server: SharedServer, server: PolicyServerHandle, multimodal: SWEBenchInstance
) -> None:
    seen = len(requests_since(server, 0))
    tools = tool_schemas(AgentConfig.default(v1alpha1.AgentKind.CHAT_AGENT).tools.enabled)
    async with ChatModel(server.url, tools=tools, sampling={"temperature": 0.0}) as model:
        status = await run(shared_server, model, multimodal, v1alpha1.AgentKind.CHAT_AGENT)
        first_user = next(m for m in model.messages if m["role"] == "user")
    assert status == "submitted"
    assert [p["image_url"]["url"] for p in first_user["content"] if p["type"] == "image_url"] == IMAGE_URLS
    records = requests_since(server, seen)
    assert records and {r["route"] for r in records} == {"chat"}
    assert all(sent_images(r) == EXPECTED for r in records)


async def test_text_only_template_refuses_images_instead_of_dropping_them(
    multimodal: SWEBenchInstance, server: PolicyServerHandle
) -> None:
    async with SGLangClient(server.url) as client:
        model = RLTokenModel(
            load_tokenizer("qwen-2.5"), client, sampling=SamplingParams(), max_context_tokens=4096, run_uid="u1"
        )
        model.add_messages(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": IMAGE_URLS[0]}},
                        {"type": "text", "text": "fix it"},
                    ],
                }
            ]
        )
        with pytest.raises(ChatTemplateError, match="cannot show images.*issueImageMode: Links"):
            await model.generate()


def test_links_mode_lists_the_images_as_text(multimodal: SWEBenchInstance) -> None:
    task = task_info(multimodal, v1alpha1.IssueImageMode.LINKS)
    assert task.issue_images == []
    assert task.problem_statement.startswith(multimodal.problem_statement.rstrip("\n"))
    assert f"1. {IMAGE_URLS[0]}\n2. an inline image/png image ({len(SCREENSHOT)} bytes)\n" in task.problem_statement
