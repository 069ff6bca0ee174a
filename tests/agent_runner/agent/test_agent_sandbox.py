"""Sandbox against a real swerex-remote on loopback."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from swerex.runtime.abstract import BashAction, CloseBashSessionRequest

from agent_runner.sandbox import Sandbox, SandboxAuthError, SandboxError, SandboxUnavailableError
from tests.support.repo_helpers import RepoSandbox
from tests.support.swerex_fault_proxy import UNKILLED_SHELL, SwerexFaultProxy
from tests.support.tcp_proxy import DroppingProxy


async def test_session_keeps_cwd_and_environment(repo_sandbox: RepoSandbox) -> None:
    sandbox, git_repo = repo_sandbox.sandbox, repo_sandbox.repo
    await sandbox.run("mkdir -p sub && cd sub && export GREETING=hello", timeout=10)
    where = await sandbox.run("pwd; echo $GREETING", timeout=10)
    assert where.output.split() == [str(git_repo / "sub"), "hello"]
    assert where.exit_code == 0


async def test_exit_codes_are_reported(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    assert (await sandbox.run("false", timeout=10)).exit_code == 1
    assert (await sandbox.run("bash -c 'exit 7'", timeout=10)).exit_code == 7
    multi = await sandbox.run("echo one\necho two\n(exit 3)", timeout=10)
    assert multi.output.split() == ["one", "two"]
    assert multi.exit_code == 3


async def test_bash_syntax_that_bashlex_cannot_parse(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    loop = await sandbox.run("for ((i=0;i<3;i++)); do printf $i; done", timeout=10)
    assert (loop.output, loop.exit_code) == ("012", 0)
    case = await sandbox.run("case abc in a*) echo matched; (exit 4);; esac", timeout=10)
    assert (case.output.strip(), case.exit_code) == ("matched", 4)
    test = await sandbox.run('x=$((1+2)); [[ $x == 3 ]] && echo "it\'s $x"', timeout=10)
    assert (test.output.strip(), test.exit_code) == ("it's 3", 0)
    function = await sandbox.run('greet() { echo "hi $1"; }', timeout=10)
    assert function.exit_code == 0
    assert (await sandbox.run("greet there", timeout=10)).output.strip() == "hi there"


async def test_exit_code_survives_a_redirected_stdout(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    hidden = await sandbox.run("exec 3>&1 >/dev/null; echo invisible; (exit 9)", timeout=10)
    assert hidden.exit_code == 9
    assert "invisible" not in hidden.output
    restored = await sandbox.run("exec 1>&3 3>&-; echo visible", timeout=10)
    assert (restored.output.strip(), restored.exit_code) == ("visible", 0)


async def test_heredoc_and_syntax_errors(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    made = await sandbox.run("cat > note.txt <<'EOF'\nline $HOME\nEOF\ncat note.txt", timeout=10)
    assert made.output.strip() == "line $HOME"
    assert made.exit_code == 0
    broken = await sandbox.run("echo (", timeout=10)
    assert broken.exit_code == 2
    assert "syntax error" in broken.output
    assert (await sandbox.run("echo still-alive", timeout=10)).output.strip() == "still-alive"


async def test_timed_out_command_is_interrupted_and_session_survives(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    await sandbox.run("cd /tmp", timeout=10)
    slow = await sandbox.run("echo started; sleep 30; echo finished > finished.txt", timeout=1)
    assert slow.timed_out
    assert slow.exit_code is None
    assert "__SWEROLLOUT" not in slow.output
    after = await sandbox.run("pwd", timeout=10)
    assert after.output.strip() == "/tmp"
    assert after.exit_code == 0
    assert not Path("/tmp/finished.txt").exists() or "finished" not in Path("/tmp/finished.txt").read_text()


async def test_timeout_ignoring_sigint_is_killed(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    stubborn = await sandbox.run("trap '' INT; sleep 30", timeout=1)
    assert stubborn.timed_out
    assert (await sandbox.run("echo ok", timeout=10)).output.strip() == "ok"


async def test_files_round_trip_through_the_sandbox(repo_sandbox: RepoSandbox) -> None:
    sandbox, git_repo = repo_sandbox.sandbox, repo_sandbox.repo
    await sandbox.write_file(str(git_repo / "deep/dir/new.txt"), "héllo\nworld\n")
    assert (git_repo / "deep/dir/new.txt").read_text() == "héllo\nworld\n"
    assert await sandbox.read_file(str(git_repo / "calc.py")) == "def add(a, b):\n    return a - b\n"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file(str(git_repo / "missing.txt"))


async def test_execute_runs_outside_the_session(repo_sandbox: RepoSandbox) -> None:
    sandbox, git_repo = repo_sandbox.sandbox, repo_sandbox.repo
    await sandbox.run("cd /tmp", timeout=10)
    result = await sandbox.execute("pwd; exit 4", cwd=str(git_repo))
    assert result.output.strip() == str(git_repo)
    assert result.exit_code == 4
    assert (await sandbox.run("pwd", timeout=10)).output.strip() == "/tmp"


async def test_wrong_token_is_a_clear_auth_error(repo_sandbox: RepoSandbox) -> None:
    swerex_server = repo_sandbox.handle
    with pytest.raises(SandboxAuthError, match="auth token"):
        await Sandbox.connect(swerex_server.url, "wrong-token", timeout=5)


async def test_unreachable_server_is_unavailable() -> None:
    from tests.support.swerex_fixture import free_port

    with pytest.raises(SandboxUnavailableError, match="not alive"):
        await Sandbox.connect(f"http://127.0.0.1:{free_port()}", "t", timeout=0.5)


async def test_reconnect_reuses_the_live_session(repo_sandbox: RepoSandbox) -> None:
    swerex_server = repo_sandbox.handle
    first = await Sandbox.connect(swerex_server.url, swerex_server.token, session="reconnect")
    await first.run("export KEEP=me", timeout=10)
    await first.close()
    second = await Sandbox.connect(swerex_server.url, swerex_server.token, session="reconnect")
    try:
        assert (await second.run("echo $KEEP", timeout=10)).output.strip() == "me"
    finally:
        await second.close(close_session=True)


COUNT_COMMAND = "touch started.txt; sleep 1; echo ran >> counter.txt; (exit 5)"


async def until_started(marker: Path) -> None:
    """Cut the connection only once the server is surely running the command."""
    for _ in range(400):
        if marker.exists():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{marker} never appeared: the command did not start")


@pytest.mark.parametrize("close_upstream", [True, False])
async def test_dropped_connection_never_runs_a_command_twice(repo_sandbox: RepoSandbox, close_upstream: bool) -> None:
    swerex_server, git_repo = repo_sandbox.handle, repo_sandbox.repo
    proxy = await DroppingProxy(
        swerex_server.port,
        drop_when=b"counter.txt",
        drop_after=0,
        close_upstream=close_upstream,
        before_drop=lambda: until_started(git_repo / "started.txt"),
    ).start()
    sandbox = await Sandbox.connect(proxy.url, swerex_server.token, session=f"proxy-{uuid.uuid4().hex[:6]}")
    try:
        result = await sandbox.run(COUNT_COMMAND, timeout=20)
    finally:
        await sandbox.close(close_session=True)
        await proxy.stop()
    assert proxy.drops == 1
    assert (git_repo / "counter.txt").read_text() == "ran\n"
    assert result.exit_code == 5


async def test_dropped_connection_after_server_forgot_the_answer(repo_sandbox: RepoSandbox) -> None:
    """The server only remembers its last answer; make it forget, then let the client re-send."""
    swerex_server, git_repo = repo_sandbox.handle, repo_sandbox.repo

    async def another_request_in_between() -> None:
        await until_started(git_repo / "started.txt")
        async with httpx.AsyncClient() as other:
            await other.post(
                f"{swerex_server.url}/execute",
                json={"command": "true", "shell": True},
                headers={"X-API-Key": swerex_server.token, "X-Request-ID": "someone-else"},
                timeout=30,
            )

    proxy = await DroppingProxy(
        swerex_server.port, drop_when=b"counter.txt", drop_after=0, before_drop=another_request_in_between
    ).start()
    sandbox = await Sandbox.connect(proxy.url, swerex_server.token, session=f"proxy-{uuid.uuid4().hex[:6]}")
    try:
        result = await sandbox.run(COUNT_COMMAND, timeout=20)
        assert (await sandbox.run("echo next", timeout=10)).output.strip() == "next"
    finally:
        await sandbox.close(close_session=True)
        await proxy.stop()
    assert (git_repo / "counter.txt").read_text() == "ran\n"
    assert result.exit_code == 5
    assert "output was lost" in result.output


async def test_exiting_the_shell_starts_a_new_one(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    await sandbox.run("export GONE=1", timeout=10)
    ended = await sandbox.run("exit 3", timeout=10)
    assert ended.exit_code is None
    assert "a new shell was started" in ended.output
    after = await sandbox.run("echo ${GONE:-unset}", timeout=10)
    assert (after.output.strip(), after.exit_code) == ("unset", 0)


async def test_dropped_connection_never_runs_an_execute_twice(repo_sandbox: RepoSandbox) -> None:
    """`execute` too: the proxy makes the server forget the answer, the client re-sends."""
    swerex_server, git_repo = repo_sandbox.handle, repo_sandbox.repo

    async def another_request_in_between() -> None:
        await until_started(git_repo / "started.txt")
        async with httpx.AsyncClient() as other:
            await other.post(
                f"{swerex_server.url}/execute",
                json={"command": "true", "shell": True},
                headers={"X-API-Key": swerex_server.token, "X-Request-ID": "someone-else"},
                timeout=30,
            )

    proxy = await DroppingProxy(
        swerex_server.port, drop_when=b"exec-counter.txt", drop_after=0, before_drop=another_request_in_between
    ).start()
    sandbox = await Sandbox.connect(proxy.url, swerex_server.token, session=f"proxy-{uuid.uuid4().hex[:6]}")
    try:
        result = await sandbox.execute(
            "touch started.txt; sleep 1; echo ran >> exec-counter.txt; exit 6", cwd=str(git_repo)
        )
        again = await sandbox.execute(["cat", "exec-counter.txt"], cwd=str(git_repo))
    finally:
        await sandbox.close(close_session=True)
        await proxy.stop()
    assert (git_repo / "exec-counter.txt").read_text() == "ran\n"
    assert result.exit_code == 6
    assert "output was lost" in result.output
    assert (again.output, again.exit_code) == ("ran\n", 0)


async def test_deleting_the_ledger_does_not_break_the_session(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    # Its own session's ledger only: the other tests' sessions share this machine's /tmp
    # (a pod's sandbox has a /tmp of its own).
    assert sandbox.ledger.startswith("/tmp/swerollout-ledger/")
    assert (await sandbox.run(f"rm -rf {sandbox.ledger}", timeout=10)).exit_code == 0
    after = await sandbox.run("echo still-fine", timeout=10)
    assert (after.output.strip(), after.exit_code) == ("still-fine", 0)
    assert (await sandbox.execute(f"rm -rf {sandbox.ledger}; echo gone")).output.strip() == "gone"
    assert (await sandbox.execute(["echo", "fine"])).output.strip() == "fine"


async def test_model_functions_cannot_break_the_guard(repo_sandbox: RepoSandbox) -> None:
    sandbox = repo_sandbox.sandbox
    await sandbox.run("mkdir() { return 1; }; printf() { :; }; echo() { :; }; alias eval=false", timeout=10)
    result = await sandbox.run("builtin echo guarded; (exit 3)", timeout=10)
    assert (result.output.strip(), result.exit_code) == ("guarded", 3)


async def test_closing_a_session_asks_again_while_its_shell_outlives_pexpects_wait(repo_sandbox: RepoSandbox) -> None:
    server = repo_sandbox.handle
    session = f"unkilled-{uuid.uuid4().hex[:6]}"
    with SwerexFaultProxy(server.url) as proxy:
        sandbox = await Sandbox.connect(proxy.url, server.token, session=session)
        assert (await sandbox.run("echo up", timeout=10)).output.strip() == "up"
        proxy.fail("/close_session", UNKILLED_SHELL, times=2)
        await sandbox.close(close_session=True)
        assert (proxy.faulted["/close_session"], proxy.forwarded["/close_session"]) == (2, 1)
    async with httpx.AsyncClient() as direct:
        gone = await direct.post(
            f"{server.url}/run_in_session",
            json=BashAction(command="echo still-here", session=session, check="ignore").model_dump(),
            headers={"X-API-Key": server.token},
            timeout=30,
        )
    assert gone.status_code == 511
    assert gone.json()["swerexception"]["class_path"].endswith("SessionDoesNotExistError")


async def test_a_shell_that_never_goes_is_an_error_not_a_session_to_reattach_to(repo_sandbox: RepoSandbox) -> None:
    server = repo_sandbox.handle
    session = f"wedged-{uuid.uuid4().hex[:6]}"
    with SwerexFaultProxy(server.url) as proxy:
        sandbox = await Sandbox.connect(proxy.url, server.token, session=session)
        try:
            # the command ends the shell; the new one is started only once the old one is gone
            proxy.fail("/close_session", UNKILLED_SHELL, times=1)
            await sandbox.run("export GONE=1", timeout=10)
            ended = await sandbox.run("exit 3", timeout=10)
            assert "a new shell was started" in ended.output
            after = await sandbox.run("echo ${GONE:-unset}", timeout=10)
            assert (after.output.strip(), after.exit_code) == ("unset", 0)
            proxy.fail("/close_session", UNKILLED_SHELL, times=100)
            with pytest.raises(SandboxError, match="restarting bash session .*Could not terminate the child"):
                await sandbox.run("exit 4", timeout=10)
            assert proxy.faulted["/close_session"] == 1 + 5
            with pytest.raises(SandboxError, match="close_session: .*Could not terminate the child"):
                await sandbox.close(close_session=True)
        finally:
            await sandbox.close()
    async with httpx.AsyncClient() as direct:
        closed = await direct.post(
            f"{server.url}/close_session",
            json=CloseBashSessionRequest(session=session).model_dump(),
            headers={"X-API-Key": server.token},
            timeout=30,
        )
    assert closed.status_code == 200, "the shell is still registered, so an honest close_session ends it"
