"""The agent loop against a real swerex-remote, driven by a scripted policy."""

from __future__ import annotations

from pathlib import Path

from agent_runner.agent.config import AgentConfig
from agent_runner.agent.loop import AgentLoop, LoopResult, StepInfo, TaskInfo
from agent_runner.policy.errors import ContextBudgetError, ModelUnavailableError
from agent_runner.policy.model import FinishReason, ModelTurn, ToolCall
from agent_runner.sandbox import Sandbox
from swerollout.api import v1alpha1
from tests.support.repo_helpers import RepoSandbox, git
from tests.support.scripted_model import ABORT, ScriptedModel, bash, call, text
from tests.support.swerex_fixture import SwerexHandle


def make_loop(
    rs: RepoSandbox, model: ScriptedModel, config: AgentConfig | None = None, steps: list[StepInfo] | None = None
) -> AgentLoop:
    task = TaskInfo(
        problem_statement="add() subtracts",
        working_dir=str(rs.repo),
        base_commit=rs.base_commit,
        repo="example/calc",
        instance_id="calc-1",
    )
    return AgentLoop(
        model, rs.sandbox, config or AgentConfig.default(), task, on_step=(steps.append if steps is not None else None)
    )


def working_tree_diff(rs: RepoSandbox) -> str:
    git(rs.repo, "add", "-A")
    return git(rs.repo, "diff", "--cached", rs.base_commit)


def limits(**overrides: object) -> AgentConfig:
    config = AgentConfig.default()
    return config.model_copy(update={"limits": config.limits.model_copy(update=overrides)})


async def test_edit_then_submit_yields_the_working_tree_diff(repo_sandbox: RepoSandbox) -> None:
    path = str(repo_sandbox.repo / "calc.py")
    model = ScriptedModel(
        [
            call("str_replace_editor", command="str_replace", path=path, old_str="a - b", new_str="a + b"),
            bash("echo 'x = 1' > extra.py && python3 -c 'import calc; print(calc.add(2, 3))'"),
            call("submit"),
        ]
    )
    steps: list[StepInfo] = []
    result = await make_loop(repo_sandbox, model, steps=steps).run()
    assert result.exit_status == "submitted"
    assert not result.partial
    assert result.submission == working_tree_diff(repo_sandbox)
    assert "+    return a + b" in (result.submission or "")
    assert "extra.py" in (result.submission or "")
    # The conversation: system, task, then each action answered by a tool message.
    assert [m["role"] for m in model.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "add() subtracts" in model.messages[1]["content"]
    assert model.messages[5]["content"].strip().endswith("5")
    assert [s.action for s in steps] == [
        f"str_replace_editor str_replace {path}",
        "echo 'x = 1' > extra.py && python3 -c 'import calc; print(calc.add(2, 3))'",
    ]
    assert steps[-1].exit_code == 0 and steps[-1].state.turns == 2


async def test_format_errors_are_requeried_then_exit_format(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([text("I think I should look around."), call("no_such_tool"), text("still nothing")])
    result = await make_loop(repo_sandbox, model, limits(max_requeries=2)).run()
    assert result.exit_status == "exit_format"
    assert result.submission == ""
    errors = [m for m in model.messages if m["role"] in ("user", "tool")][1:]
    assert len(errors) == 2
    assert "expected exactly one tool call, got 0" in errors[0]["content"]
    assert errors[1]["role"] == "tool" and "there is no tool named 'no_such_tool'" in errors[1]["content"]
    assert result.state.turns == 3


async def test_error_exit_autosubmits_the_diff(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("echo 'print(1)' >> calc.py"), text("oops"), text("oops again")])
    result = await make_loop(repo_sandbox, model, limits(max_requeries=1)).run()
    assert result.exit_status == "submitted (exit_format)"
    assert result.submission == working_tree_diff(repo_sandbox)
    assert "+print(1)" in (result.submission or "")


async def test_a_good_reply_resets_the_requery_count(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([text("no"), bash("true"), text("no"), call("submit")])
    result = await make_loop(repo_sandbox, model, limits(max_requeries=1)).run()
    assert result.exit_status == "submitted"


async def test_blocked_commands_are_refused_without_running(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("vim calc.py"), bash("python3"), call("submit")])
    result = await make_loop(repo_sandbox, model).run()
    assert result.exit_status == "submitted"
    replies = [m["content"] for m in model.messages if m["role"] == "tool"]
    assert "`vim calc.py` is not available" in replies[0]
    assert "`python3` is not available" in replies[1]


async def test_max_turns(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash(f"echo {i} >> turns.txt") for i in range(10)])
    result = await make_loop(repo_sandbox, model, limits(max_turns=3)).run()
    assert result.exit_status == "submitted (exit_max_iter_out)"
    assert model.calls == 3
    assert (repo_sandbox.repo / "turns.txt").read_text().split() == ["0", "1", "2"]


async def test_total_execution_time(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("sleep 0.4")] * 10)
    steps: list[StepInfo] = []
    result = await make_loop(repo_sandbox, model, limits(total_execution_time=1.0), steps=steps).run()
    assert result.exit_status == "exit_total_execution_time"
    # The model is asked again only while the summed command time is under the limit.
    assert model.calls == len(steps) < 10
    # The stopping rule, not a speed target: the run stops at the first step whose
    # summed command time reaches the limit.
    summed = [step.state.execution_seconds for step in steps]
    assert max(summed[:-1], default=0.0) < 1.0 <= summed[-1]


async def test_repeated_command_timeouts(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("sleep 20"), bash("sleep 20"), bash("echo unreachable")])
    result = await make_loop(repo_sandbox, model, limits(command_timeout=0.5, max_consecutive_timeouts=2)).run()
    assert result.exit_status == "exit_command_timeout"
    assert model.calls == 2
    first_reply = [m["content"] for m in model.messages if m["role"] == "tool"][0]
    assert "`sleep 20` was stopped after 0.5 seconds" in first_reply
    # The shell still works after the interrupted commands.
    assert (await repo_sandbox.sandbox.run("echo alive", timeout=10)).output.strip() == "alive"


async def test_abort_returns_partial_and_resume_continues(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("echo once >> log.txt"), ABORT])
    steps: list[StepInfo] = []
    loop = make_loop(repo_sandbox, model, steps=steps)
    partial = await loop.run()
    assert partial.partial and partial.exit_status is None
    assert partial.state.turns == 1 and partial.state.started
    snapshot = partial.state.model_dump_json()

    # A new loop object (as after a snapshot restore) picks up the same conversation.
    model.script = [bash("cat log.txt"), call("submit")]
    resumed_loop = make_loop(repo_sandbox, model, steps=steps)
    result: LoopResult = await resumed_loop.resume(type(partial.state).model_validate_json(snapshot))
    assert result.exit_status == "submitted"
    assert result.state.turns == 3
    assert (repo_sandbox.repo / "log.txt").read_text() == "once\n"
    assert [m["role"] for m in model.messages].count("system") == 1
    assert [s.state.turns for s in steps] == [1, 2]


async def test_full_context_is_exit_context(repo_sandbox: RepoSandbox) -> None:
    config = limits(max_context_tokens=100)
    model = ScriptedModel([text("```bash\nls", finish_reason=FinishReason.LENGTH)], context_tokens=100)
    result = await make_loop(repo_sandbox, model, config).run()
    assert result.exit_status == "exit_context"

    refused = ScriptedModel([ContextBudgetError("no room left")])
    assert (await make_loop(repo_sandbox, refused).run()).exit_status == "exit_context"


async def test_long_reply_with_room_left_is_a_format_error(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([text("```bash\nls", finish_reason=FinishReason.LENGTH), call("submit")], context_tokens=10)
    result = await make_loop(repo_sandbox, model, limits(max_context_tokens=100)).run()
    assert result.exit_status == "submitted"


async def test_model_api_failure_is_exit_api(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("echo 'x' > f.txt"), ModelUnavailableError("503 after 5 retries")])
    result = await make_loop(repo_sandbox, model).run()
    assert result.exit_status == "submitted (exit_api)"
    assert result.error is not None and "503" in result.error


async def test_multiple_tool_calls_are_answered_per_call(repo_sandbox: RepoSandbox) -> None:
    two = ModelTurn(
        text="",
        finish_reason=FinishReason.STOP,
        tool_calls=[
            ToolCall(id="a", name="bash", arguments={"command": "ls"}),
            ToolCall(id="b", name="bash", arguments={"command": "pwd"}),
        ],
    )
    model = ScriptedModel([two, call("submit")])
    assert (await make_loop(repo_sandbox, model).run()).exit_status == "submitted"
    replies = [m for m in model.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in replies] == ["a", "b"]
    assert "got 2" in replies[0]["content"]


async def test_long_output_is_truncated(repo_sandbox: RepoSandbox) -> None:
    config = AgentConfig.default()
    config.tools.max_observation_chars = 100
    model = ScriptedModel([bash("seq 1 1000"), call("submit")])
    await make_loop(repo_sandbox, model, config).run()
    reply = [m["content"] for m in model.messages if m["role"] == "tool"][0]
    assert "cut to the first 100 characters" in reply
    assert "1\n2\n3\n" in reply and "999" not in reply


async def test_text_bash_agent(repo_sandbox: RepoSandbox) -> None:
    config = AgentConfig.default(v1alpha1.AgentKind.TEXT_BASH_AGENT)
    model = ScriptedModel(
        [
            text("Let me fix it.\n```bash\nsed -i 's/a - b/a + b/' calc.py\n```"),
            text("Two blocks:\n```bash\nls\n```\n```bash\npwd\n```"),
            text("Done.\n```bash\nsubmit\n```"),
        ]
    )
    result = await make_loop(repo_sandbox, model, config).run()
    assert result.exit_status == "submitted"
    assert "+    return a + b" in (result.submission or "")
    replies = [m for m in model.messages if m["role"] == "user"][1:]
    assert all(m["role"] == "user" for m in replies)
    assert replies[1]["content"].startswith("Your reply could not be used: expected exactly one ```bash")
    assert "found 2" in replies[1]["content"]


async def test_dead_sandbox_is_exit_environment_error(swerex_server: SwerexHandle, git_repo: Path) -> None:
    sandbox = await Sandbox.connect(swerex_server.url, swerex_server.token, retry_attempts=2)
    rs = RepoSandbox(sandbox, git_repo, git(git_repo, "rev-parse", "HEAD").strip(), swerex_server)

    def kill_server(history: list[dict[str, object]]) -> ModelTurn:
        swerex_server.stop()
        return bash("echo hello")

    model = ScriptedModel([bash("true"), kill_server])
    try:
        result = await make_loop(rs, model).run()
    finally:
        await sandbox.close()
    assert result.exit_status == "exit_environment_error"
    assert result.submission is None
    assert result.error is not None and "SandboxUnavailableError" in result.error


async def test_missing_working_dir_is_an_environment_error(repo_sandbox: RepoSandbox) -> None:
    task = TaskInfo(problem_statement="p", working_dir="/nonexistent/testbed", base_commit=repo_sandbox.base_commit)
    model = ScriptedModel([call("submit")])
    result = await AgentLoop(model, repo_sandbox.sandbox, AgentConfig.default(), task).run()
    assert result.exit_status == "exit_environment_error"
    assert result.error is not None and "cannot prepare the shell in /nonexistent/testbed" in result.error
    assert model.calls == 0


async def test_unexpected_failure_is_exit_error_with_autosubmission(repo_sandbox: RepoSandbox) -> None:
    def failing_reporter(info: StepInfo) -> None:
        raise RuntimeError("progress store is gone")

    model = ScriptedModel([bash("echo 'y = 2' > new_file.py"), call("submit")])
    task = TaskInfo(problem_statement="p", working_dir=str(repo_sandbox.repo), base_commit=repo_sandbox.base_commit)
    result = await AgentLoop(model, repo_sandbox.sandbox, AgentConfig.default(), task, on_step=failing_reporter).run()
    assert result.exit_status == "submitted (exit_error)"
    assert result.error == "RuntimeError: progress store is gone"
    assert "+y = 2" in (result.submission or "")


async def test_request_pause_stops_at_the_next_step_boundary(repo_sandbox: RepoSandbox) -> None:
    model = ScriptedModel([bash("echo one | tee -a log.txt; false"), bash("echo two >> log.txt"), call("submit")])
    loop = make_loop(repo_sandbox, model)
    loop.on_step = lambda info: loop.request_pause()
    partial = await loop.run()
    assert partial.partial and partial.state.turns == 1
    assert model.calls == 1
    assert "(exit code 1)" in model.messages[-1]["content"]
    loop.on_step = None
    result = await loop.resume(partial.state)
    assert result.exit_status == "submitted"
    assert (repo_sandbox.repo / "log.txt").read_text() == "one\ntwo\n"
