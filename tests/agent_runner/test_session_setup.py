"""A runner that cannot set up reports RunnerSetupFailed with the reason (it used to crash as PodLost).

The operator refuses a bad spec before any pod exists (InvalidSpec), so the runner
sees one only when its version disagrees with the operator's; the same model then
names the same field. The ingest API here is a real HTTP server recording events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent_runner.pod.session import Runner
from agent_runner.sandbox import Sandbox
from swerollout.wire import ingest as wire
from swerollout.wire.runner_env import RunnerEnv

SPEC: dict[str, Any] = {
    "instance": {
        "instanceId": "demo__calc-1",
        "repo": "demo/calc",
        "baseCommit": "abcdef0",
        "image": "registry.example/calc:1",
        "problemStatement": "add() is wrong",
        "evaluation": {"failToPass": ["tests/test_calc.py::test_add"]},
    },
    "inference": {"endpoint": "http://127.0.0.1:9", "tokenizer": "qwen-2.5"},
}


@pytest.fixture
async def ingest() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    events: list[dict[str, Any]] = []

    async def record(request: web.Request) -> web.Response:
        events.append(await request.json())
        return web.json_response(wire.Ack().model_dump(mode="json"))

    app = web.Application()
    app.router.add_post("/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", events
    finally:
        await runner.cleanup()


def _runner(url: str, tmp_path: Path) -> Runner:
    token = tmp_path / "token"
    token.write_text("t")
    env = RunnerEnv(
        ingest_url=url,
        namespace="ns",
        name="r",
        uid="u-1",
        ingest_token_file=str(token),
        swerex_url="http://127.0.0.1:9",
        swerex_token_file=str(token),
    )
    runner = Runner(env)
    # Setup fails before the sandbox is used; the runner only needs to hold one.
    runner.sandbox = Sandbox.__new__(Sandbox)
    return runner


@pytest.mark.parametrize(
    "agent, expected",
    [
        (
            {"templates": {"nextStepTemplate": "{{ observaton }}"}},
            "spec.agent.templates.nextStepTemplate: next_step_template uses unknown variable(s) ['observaton']",
        ),
        ({"tools": {"enabled": ["bash"]}}, "spec.agent.tools: enabled must include submit"),
    ],
)
async def test_a_bad_agent_config_reports_runner_setup_failed(
    ingest: tuple[str, list[dict[str, Any]]], tmp_path: Path, agent: dict[str, Any], expected: str
) -> None:
    url, events = ingest
    runner = _runner(url, tmp_path)
    try:
        await runner._execute(wire.Run(id="a1", spec={**SPEC, "agent": agent}))
    finally:
        await runner.ingest.aclose()
    (event,) = events
    assert event["kind"] == wire.EventKind.FAILED.value and event["reason"] == "RunnerSetupFailed"
    assert event["message"].startswith(expected), json.dumps(event)


async def test_issue_images_for_a_text_only_template_fail_setup_before_any_request(
    ingest: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Never a silent drop, also for a runner the operator could not check (a tokenizer directory)."""
    url, events = ingest
    spec = {**SPEC, "instance": {**SPEC["instance"], "issueImages": ["https://user-images.example/a.png"]}}
    runner = _runner(url, tmp_path)
    try:
        await runner._execute(wire.Run(id="a1", spec=spec))
    finally:
        await runner.ingest.aclose()
    (event,) = events
    assert event["kind"] == wire.EventKind.FAILED.value and event["reason"] == "RunnerSetupFailed"
    assert event["message"].startswith(
        "IssueImageError: spec.inference.tokenizer 'qwen-2.5': its chat template cannot show images"
    ), json.dumps(event)


async def test_a_tokenizer_that_cannot_spell_a_newline_fails_setup_before_any_request(
    ingest: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Refused by the runner too (a spec applied with kubectl skips the client), naming the character."""
    url, events = ingest
    spec = {**SPEC, "inference": {**SPEC["inference"], "tokenizer": "jiutian-139moe-chat"}}
    runner = _runner(url, tmp_path)
    try:
        await runner._execute(wire.Run(id="a1", spec=spec))
    finally:
        await runner.ingest.aclose()
    (event,) = events
    assert event["kind"] == wire.EventKind.FAILED.value and event["reason"] == "RunnerSetupFailed"
    assert event["message"].startswith(
        "UnencodableTextError: spec.inference.tokenizer 'jiutian-139moe-chat' cannot encode ordinary text"
    ), json.dumps(event)
    assert "'\\n' (newline, U+000A)" in event["message"]
