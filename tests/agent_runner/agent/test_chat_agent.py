"""ChatAgent: the loop with ChatModel against the real policy server's /v1/chat/completions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from aiohttp import web

from agent_runner.agent.config import AgentConfig
from agent_runner.agent.loop import AgentLoop, TaskInfo
from agent_runner.agent.tools import tool_schemas
from agent_runner.policy.chat_model import ChatModel, chat_completions_url, chat_model_from_spec
from agent_runner.policy.errors import ModelProtocolError, ModelUnavailableError
from agent_runner.policy.model import FinishReason
from swerollout.api import v1alpha1
from swerollout.backoff import Backoff
from swerollout_dev.policy_server.launch import PolicyServerHandle, launch
from tests.support.repo_helpers import RepoSandbox, git

PROBLEM = "calc.add returns the difference of its arguments instead of their sum (issue 4711)."
GOLD_PATCH = (
    "diff --git a/calc.py b/calc.py\n"
    "--- a/calc.py\n"
    "+++ b/calc.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n"
    "-    return a - b\n"
    "+    return a + b\n"
)


@pytest.fixture(scope="module")
def policy_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PolicyServerHandle]]:
    tasks = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": "calc-4711", "patch": GOLD_PATCH, "problem_statement": PROBLEM}) + "\n")
    servers: dict[str, PolicyServerHandle] = {}
    try:
        servers["oracle"] = launch("oracle", tasks=tasks)
        servers["null"] = launch("null")
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def chat_loop(
    rs: RepoSandbox, url: str, kind: v1alpha1.AgentKind, **model_options: object
) -> tuple[AgentLoop, ChatModel]:
    config = AgentConfig.default(kind)
    tools = tool_schemas(config.tools.enabled) if kind != v1alpha1.AgentKind.TEXT_BASH_AGENT else None
    model = ChatModel(url, tools=tools, sampling={"temperature": 0.0}, **model_options)  # type: ignore[arg-type]
    task = TaskInfo(
        problem_statement=PROBLEM,
        working_dir=str(rs.repo),
        base_commit=rs.base_commit,
        repo="example/calc",
        instance_id="calc-4711",
    )
    return AgentLoop(model, rs.sandbox, config, task), model


def working_tree_diff(rs: RepoSandbox) -> str:
    git(rs.repo, "add", "-A")
    return git(rs.repo, "diff", "--cached", rs.base_commit)


@pytest.mark.parametrize("kind", [v1alpha1.AgentKind.CHAT_AGENT, v1alpha1.AgentKind.TEXT_BASH_AGENT])
async def test_oracle_solves_the_task(
    repo_sandbox: RepoSandbox, policy_servers: dict[str, PolicyServerHandle], kind: v1alpha1.AgentKind
) -> None:
    loop, model = chat_loop(repo_sandbox, policy_servers["oracle"].url, kind)
    async with model:
        result = await loop.run()
    assert result.exit_status == "submitted", result.error
    assert (repo_sandbox.repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert result.submission == working_tree_diff(repo_sandbox)
    assert "-    return a - b\n+    return a + b" in (result.submission or "")
    assert result.state.turns == 2
    if kind == v1alpha1.AgentKind.CHAT_AGENT:
        assert [m["role"] for m in model.messages] == ["system", "user", "assistant", "tool", "assistant"]
        assert model.messages[2]["tool_calls"][0]["function"]["name"] == "bash"
    else:
        assert [m["role"] for m in model.messages] == ["system", "user", "assistant", "user", "assistant"]
        assert "```bash\nsubmit\n```" in model.messages[-1]["content"]
    assert model.context_tokens > 0


async def test_null_policy_submits_an_empty_patch(
    repo_sandbox: RepoSandbox, policy_servers: dict[str, PolicyServerHandle]
) -> None:
    loop, model = chat_loop(repo_sandbox, policy_servers["null"].url, v1alpha1.AgentKind.CHAT_AGENT)
    async with model:
        result = await loop.run()
    assert result.exit_status == "submitted"
    assert result.submission == ""
    assert result.state.turns == 1


async def test_transient_server_errors_are_retried(
    repo_sandbox: RepoSandbox, policy_servers: dict[str, PolicyServerHandle]
) -> None:
    url = policy_servers["null"].url
    httpx.post(f"{url}/_standin/faults", json={"fail_next": 2}).raise_for_status()
    loop, model = chat_loop(
        repo_sandbox,
        url,
        v1alpha1.AgentKind.CHAT_AGENT,
        backoff=Backoff(first_seconds=0.05, max_seconds=8.0, attempts=6),
    )
    async with model:
        result = await loop.run()
    assert result.exit_status == "submitted"
    assert httpx.get(f"{url}/_standin/faults").json()["fail_next"] == 0


async def test_server_errors_beyond_the_retries_are_exit_api(
    repo_sandbox: RepoSandbox, policy_servers: dict[str, PolicyServerHandle]
) -> None:
    url = policy_servers["null"].url
    httpx.post(f"{url}/_standin/faults", json={"fail_next": 3}).raise_for_status()
    loop, model = chat_loop(
        repo_sandbox,
        url,
        v1alpha1.AgentKind.CHAT_AGENT,
        backoff=Backoff(first_seconds=0.05, max_seconds=8.0, attempts=3),
    )
    async with model:
        result = await loop.run()
    assert result.exit_status == "exit_api"
    assert result.error is not None and "503" in result.error and "failed 3 times" in result.error


async def test_wrong_endpoint_is_a_clear_protocol_error(policy_servers: dict[str, PolicyServerHandle]) -> None:
    async with ChatModel(f"{policy_servers['null'].url}/not-openai", backoff=Backoff(attempts=1)) as model:
        model.add_messages([{"role": "user", "content": "hi"}])
        with pytest.raises(ModelProtocolError, match="404: no OpenAI-compatible chat completions endpoint"):
            await model.generate()


async def test_unreachable_server_is_unavailable() -> None:
    from tests.support.swerex_fixture import free_port

    async with ChatModel(f"http://127.0.0.1:{free_port()}", backoff=Backoff(first_seconds=0.01, attempts=2)) as model:
        model.add_messages([{"role": "user", "content": "hi"}])
        with pytest.raises(ModelUnavailableError, match="ConnectError"):
            await model.generate()


def test_endpoint_forms() -> None:
    assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"


async def test_model_from_spec_sends_the_spec_sampling(
    repo_sandbox: RepoSandbox, policy_servers: dict[str, PolicyServerHandle]
) -> None:
    inference = v1alpha1.Inference(
        endpoint=policy_servers["null"].url,
        sampling=v1alpha1.Sampling(temperature=0.0, max_new_tokens=64, seed=7, stop=["</done>"]),
    )
    async with chat_model_from_spec(inference, tools=tool_schemas(["bash", "submit"])) as model:
        assert model.sampling == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "seed": 7, "stop": ["</done>"]}
        model.add_messages([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
        turn = await model.generate()
    assert [call.name for call in turn.tool_calls] == ["submit"]
    assert 0 < turn.new_tokens <= 64


class CannedOpenAI:
    """A loopback HTTP server answering chat completions from a list (the server side, not under test)."""

    def __init__(self, answers: list[tuple[int, dict[str, object] | str, dict[str, str]]]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, object]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> CannedOpenAI:
        app = web.Application()

        async def handle(request: web.Request) -> web.Response:
            self.requests.append(await request.json())
            status, body, headers = self.answers.pop(0)
            if isinstance(body, str):
                return web.Response(status=status, text=body, headers=headers)
            return web.json_response(body, status=status, headers=headers)

        app.router.add_post("/v1/chat/completions", handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def completion(message: dict[str, object], finish_reason: str = "stop") -> dict[str, object]:
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


async def test_malformed_tool_arguments_become_a_parse_error() -> None:
    bad_call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}],
    }
    async with CannedOpenAI([(200, completion(bad_call, "tool_calls"), {})]) as server:
        async with ChatModel(server.url, tools=tool_schemas(["bash", "submit"])) as model:
            model.add_messages([{"role": "user", "content": "go"}])
            turn = await model.generate(max_new_tokens=32)
    assert turn.tool_calls == []
    assert turn.parse_error is not None and "tool call 0 (bash): arguments are not valid JSON" in turn.parse_error
    assert server.requests[0]["max_tokens"] == 32
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["bash", "submit"]  # type: ignore[index]
    # The raw call stays in the history so the next request can answer its id.
    assert model.messages[-1]["tool_calls"][0]["id"] == "c1"


async def test_rate_limit_is_retried_and_abort_is_not_kept() -> None:
    answers: list[tuple[int, dict[str, object] | str, dict[str, str]]] = [
        (429, {"error": "slow down"}, {"Retry-After": "0"}),
        (200, completion({"role": "assistant", "content": "partial"}, "abort"), {}),
        (200, completion({"role": "assistant", "content": "done"}, "length"), {}),
    ]
    async with CannedOpenAI(answers) as server:
        async with ChatModel(server.url, backoff=Backoff(first_seconds=0.01, max_seconds=8.0, attempts=6)) as model:
            model.add_messages([{"role": "user", "content": "go"}])
            aborted = await model.generate()
            assert aborted.finish_reason == FinishReason.ABORT
            assert [m["role"] for m in model.messages] == ["user"]
            final = await model.generate()
    assert final.finish_reason == FinishReason.LENGTH and final.text == "done"
    assert model.context_tokens == 15
    assert len(server.requests) == 3


async def test_client_errors_are_not_retried() -> None:
    async with CannedOpenAI([(400, {"error": {"message": "model 'x' not found"}}, {})]) as server:
        async with ChatModel(server.url, model="x") as model:
            model.add_messages([{"role": "user", "content": "go"}])
            with pytest.raises(ModelProtocolError, match="HTTP 400.*model 'x' not found"):
                await model.generate()
    assert len(server.requests) == 1


async def test_chat_abort_is_partial_and_resume_finishes(
    repo_sandbox: RepoSandbox, policy_servers: dict[str, PolicyServerHandle]
) -> None:
    url = policy_servers["null"].url
    loop, model = chat_loop(repo_sandbox, url, v1alpha1.AgentKind.CHAT_AGENT)
    async with model:
        httpx.post(f"{url}/_standin/faults", json={"abort_after_tokens": 2}).raise_for_status()
        try:
            partial = await loop.run()
        finally:
            httpx.post(f"{url}/_standin/faults", json={"clear_abort_after_tokens": True}).raise_for_status()
        assert partial.partial and partial.state.turns == 0
        assert [m["role"] for m in model.messages] == ["system", "user"]
        result = await loop.resume(partial.state)
    assert result.exit_status == "submitted"
    assert [m["role"] for m in model.messages] == ["system", "user", "assistant"]
