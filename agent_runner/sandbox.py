"""The runner's only client of SWE-ReX (swerex-remote in the sandbox container).

Everything that crosses the wire to swerex-remote goes through this module: a
persistent bash session (`run`), one-off subprocesses (`execute`), and file I/O.
The request/response shapes are swe-rex's own pydantic models
(`swerex.runtime.abstract`); the HTTP layer is ours because swe-rex 1.4's
`RemoteRuntime` picks a fresh X-Request-ID inside every call and cannot be told
to re-send one after a dropped connection, which is exactly what safe retries
need.

Why a command never runs twice (swe-rex 1.4 behaviour, read from its source):
- The server remembers the *last* completed request id and replays its answer
  when the same id comes again. It forgets everything else, so a replay only
  works while no other id-bearing request came in between (we serialize all
  requests of a sandbox behind one lock, and one runner owns one sandbox).
- The server runs a session command with blocking pexpect calls inside its
  event loop, so a retry that arrives while the first attempt still runs is
  only read after that attempt finished and stored its answer -> replayed.
- Belt and braces for the cases replay cannot cover (server restarted, or the
  first answer was never stored): every command (session or `execute`) is wrapped in a guard
  that atomically claims a ledger directory named after the request id
  (`mkdir` fails if it exists) and records the exit code there. A re-sent
  command whose claim fails does not run again; we report the recorded exit
  code and say that the output was lost.

Why exit codes are never lost: swe-rex reads `$?` with a second `echo` and a
1-second expect, which fails on a loaded machine and leaves the session's
output out of step. We skip that (check="ignore"): the guard prints the exit
code after the command's output, behind a marker unique to the request, and
the command runs through `eval` of a quoted string so that swe-rex's bashlex
split always succeeds (its fallback path needs the skipped step to stay in
sync). `eval` keeps the session semantics (cd, exports, functions persist);
a syntax error surfaces at run time as bash's message with exit code 2.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import uuid
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError
from swerex.runtime.abstract import (
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionRequest,
    Command,
    CommandResponse,
    CreateBashSessionRequest,
    ReadFileRequest,
    ReadFileResponse,
    WriteFileRequest,
)

from swerollout.backoff import Backoff

__all__ = [
    "CommandResult",
    "Sandbox",
    "SandboxAuthError",
    "SandboxError",
    "SandboxProtocolError",
    "SandboxUnavailableError",
]


class SandboxError(Exception):
    """Root of sandbox failures. `retryable` says whether trying again may help."""

    retryable = False


class SandboxUnavailableError(SandboxError):
    """swerex-remote cannot be reached (not started yet, died, network gone)."""

    retryable = True


class SandboxAuthError(SandboxError):
    """swerex-remote rejected the auth token: fix the token, retrying will not help."""


class SandboxProtocolError(SandboxError):
    """swerex-remote answered something this client does not understand (wrong URL or version)."""


class CommandResult(BaseModel):
    """What one command produced."""

    model_config = ConfigDict(extra="forbid")

    output: str
    """stdout and stderr interleaved as the terminal saw them."""
    exit_code: int | None
    """None only when the command timed out or its exit code could not be read."""
    timed_out: bool = False
    """True when the command hit its timeout and was interrupted."""
    stderr: str = ""
    """Only for `execute(..., merge_stderr=False)`; otherwise stderr is part of `output`."""


_M = TypeVar("_M", bound=BaseModel)

# The session's bash runs the model's command inside this guard. The claim and
# the exit-code record live outside the repository so that diffs never see them.
_DUPLICATE_MARKER = "__SWEROLLOUT_COMMAND_ALREADY_RAN__"
_LEDGER_ROOT = "/tmp/swerollout-ledger"
# pexpect's answer when a shell survived its SIGKILL wait, and the pauses before asking again
_UNKILLED_SHELL = "ExceptionPexpect"
_UNKILLED_SHELL_PAUSES = (0.5, 1.0, 2.0, 4.0)


def _exit_marker(request_id: str) -> str:
    return f"__SWEROLLOUT_EXIT_{request_id}="


def _start_marker(request_id: str) -> str:
    return f"__SWEROLLOUT_START_{request_id}__"


def _split_exit_code(raw: str, request_id: str) -> CommandResult:
    """Cut the command's output out from between the guard's start and exit-code lines.

    Whatever the terminal printed before the start line (readline's newline on
    accepting the input) is not the command's output.
    """
    start = raw.find(_start_marker(request_id) + "\n")
    if start != -1:
        raw = raw[start + len(_start_marker(request_id)) + 1 :]
    marker = "\n" + _exit_marker(request_id)
    index = raw.rfind(marker)
    if index == -1:
        # The command never reached the guard's epilogue (it replaced the shell's
        # stdout, for instance); the output is all we have.
        return CommandResult(output=raw, exit_code=None)
    code, _, rest = raw[index + len(marker) :].partition("\n")
    exit_code = int(code) if code.strip().isdigit() else None
    return CommandResult(output=raw[:index] + rest, exit_code=exit_code)


ALIVE_POLL = Backoff(first_seconds=0.05, max_seconds=0.2)
"""How often a new connection asks swerex-remote whether it is alive (the budget is the caller's timeout)."""


class _NotAlive(Exception):
    """swerex-remote did not answer /is_alive yet, or not with yes."""


def _resend_policy(attempts: int) -> Backoff:
    """How long to keep re-sending a request after transport failures."""
    return Backoff(first_seconds=0.2, max_seconds=3.0, attempts=attempts)


class Sandbox:
    """A connection to one swerex-remote server and its persistent bash session.

    Not safe for concurrent use from several tasks at once on purpose: requests
    are serialized, because the server can only replay the last answer.
    """

    def __init__(self, client: httpx.AsyncClient, *, session: str, ledger: str, retry: Backoff) -> None:
        self._client = client
        self._session = session
        self._ledger = ledger
        self._retry = retry
        self._lock = asyncio.Lock()

    @property
    def ledger(self) -> str:
        """This session's command ledger in the sandbox (one directory per session name)."""
        return self._ledger

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        url: str,
        auth_token: str,
        *,
        timeout: float = 60.0,
        session: str = "default",
        startup_source: list[str] | None = None,
        retry_attempts: int = 6,
    ) -> Sandbox:
        """Wait until swerex-remote at `url` answers (up to `timeout` s) and open the bash session.

        An existing session of the same name is reused (a resumed runner finds
        the shell it left, with its cwd and environment).
        """
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", session):
            raise ValueError(f"session name {session!r}: use 1-64 letters, digits, '_', '.', '-'")
        client = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"X-API-Key": auth_token},
            timeout=httpx.Timeout(30.0, read=None),
        )
        sandbox = cls(
            client,
            session=session,
            ledger=f"{_LEDGER_ROOT}/{session}",
            retry=_resend_policy(retry_attempts),
        )
        try:
            await sandbox._wait_until_alive(timeout)
            await sandbox._open_session(startup_source or [])
        except BaseException:
            await client.aclose()
            raise
        return sandbox

    async def close(self, *, close_session: bool = False) -> None:
        """Drop the HTTP client; with close_session, also end the bash session on the server."""
        try:
            if close_session:
                async with self._lock:
                    status, body = await self._end_session()
                    if status != 200:
                        raise SandboxError(f"close_session: {self._remote_message(body)}")
        finally:
            await self._client.aclose()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- commands ----------------------------------------------------------

    async def run(self, command: str, *, timeout: float | None) -> CommandResult:
        """Run `command` in the persistent bash session (cwd, env and functions persist).

        On timeout the command is interrupted (Ctrl-C, then kill) and the
        session stays usable; the result has timed_out=True.
        """
        async with self._lock:
            request_id = uuid.uuid4().hex
            action = BashAction(
                command=self._guarded(command, request_id),
                session=self._session,
                timeout=timeout,
                check="ignore",
            )
            read_timeout = None if timeout is None else timeout + 30.0
            status, body = await self._post_raw("run_in_session", action, request_id, read_timeout)
            if status == 511:
                return await self._command_failure(body, command, request_id)
            observation = self._parse(BashObservation, status, body, "run_in_session")
            if _DUPLICATE_MARKER in observation.output:
                return await self._recover_lost_result(request_id)
            result = _split_exit_code(observation.output, request_id)
            if result.exit_code is None:
                # The marker line never reached the terminal (stdout redirected by
                # the command, e.g. `exec >file`): the ledger still has the code.
                result.exit_code = await self._recorded_exit_code(request_id)
            return result

    async def execute(
        self,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        merge_stderr: bool = True,
    ) -> CommandResult:
        """Run a one-off subprocess outside the session (stderr merged into output unless merge_stderr=False).

        Use it for the runner's own bookkeeping (git diff, eval scripts) so the
        model's shell state is left alone.
        """
        async with self._lock:
            return await self._execute_unlocked(command, timeout=timeout, cwd=cwd, merge_stderr=merge_stderr)

    async def read_file(self, path: str) -> str:
        """Return the text of `path` (undecodable bytes are backslash-escaped)."""
        async with self._lock:
            request = ReadFileRequest(path=path, errors="backslashreplace")
            status, body = await self._post_raw("read_file", request, uuid.uuid4().hex, 60.0)
            if status == 511:
                missing = ("FileNotFoundError", "IsADirectoryError", "NotADirectoryError")
                if self._remote_class(body).endswith(missing):
                    raise FileNotFoundError(f"{path}: {self._remote_message(body)}")
                raise SandboxError(f"reading {path}: {self._remote_message(body)}")
            return self._parse(ReadFileResponse, status, body, "read_file").content

    async def write_file(self, path: str, content: str) -> None:
        """Write `content` to `path`, creating parent directories."""
        async with self._lock:
            await self._post("write_file", WriteFileRequest(path=path, content=content))

    async def interrupt(self) -> CommandResult:
        """Send Ctrl-C to the session (then Ctrl-Z + kill if Ctrl-C is ignored)."""
        async with self._lock:
            return await self._interrupt_unlocked()

    # -- internals ---------------------------------------------------------

    def _ensure_ledger(self) -> str:
        # The model can delete /tmp; without its parent every claim would fail
        # and look like a duplicate.
        return f"command mkdir -p {shlex.quote(self._ledger)} 2>/dev/null"

    def _guarded(self, command: str, request_id: str) -> str:
        # `command` / `builtin` keep the guard working if the model defined
        # functions or aliases named mkdir, printf, echo or eval.
        claim = shlex.quote(f"{self._ledger}/{request_id}")
        return (
            f"{self._ensure_ledger()}; "
            f"if command mkdir {claim} 2>/dev/null; then builtin printf '%s\\n' {_start_marker(request_id)}; "
            f"builtin eval {shlex.quote(command)}; "
            f"__swerollout_rc=$?; {{ builtin echo $__swerollout_rc > {claim}/rc; }} 2>/dev/null; "
            f"builtin printf '\\n%s%s\\n' {_exit_marker(request_id)} $__swerollout_rc; (exit $__swerollout_rc); "
            f"else builtin echo {_DUPLICATE_MARKER}; fi"
        )

    async def _recorded_exit_code(self, request_id: str) -> int | None:
        rc_path = f"{self._ledger}/{request_id}/rc"
        result = await self._execute_unlocked(["cat", rc_path], timeout=30.0, cwd=None, guard=False)
        code = result.output.strip()
        return int(code) if result.exit_code == 0 and code.isdigit() else None

    async def _recover_lost_result(self, request_id: str) -> CommandResult:
        return CommandResult(
            output="(the connection to the sandbox dropped while this command ran; it ran exactly once, "
            "but its output was lost)",
            exit_code=await self._recorded_exit_code(request_id),
        )

    async def _command_failure(self, body: Any, command: str, request_id: str) -> CommandResult:
        remote_class = self._remote_class(body)
        if remote_class.endswith("CommandTimeoutError"):
            interrupted = await self._interrupt_unlocked()
            # What the interrupt collected is the tail of the command's output.
            output = interrupted.output.replace(_start_marker(request_id), "").strip("\n")
            return CommandResult(output=output, exit_code=None, timed_out=True)
        if remote_class.endswith("BashIncorrectSyntaxError"):
            info = body["swerexception"].get("extra_info") or {}
            output = (str(info.get("bash_stderr", "")) + str(info.get("bash_stdout", ""))).strip()
            return CommandResult(output=output.replace("/usr/bin/env: ", ""), exit_code=2)
        if remote_class == "pexpect.exceptions.EOF":
            # The command ended the shell (`exit`, `exec`, a crash). Start a new
            # one so the run can go on; cwd and environment are back to defaults.
            await self._restart_session()
            return CommandResult(
                output="(the shell exited; a new shell was started: cd and exported variables were reset)",
                exit_code=None,
            )
        if remote_class.endswith("SessionDoesNotExistError"):
            raise SandboxUnavailableError(f"the sandbox's bash session {self._session!r} is gone (server restarted?)")
        raise SandboxError(f"running {command[:200]!r}: {remote_class}: {self._remote_message(body)}")

    async def _interrupt_unlocked(self) -> CommandResult:
        status, body = await self._post_raw(
            "run_in_session",
            BashInterruptAction(session=self._session, timeout=1.0, n_retry=3),
            uuid.uuid4().hex,
            60.0,
        )
        if status == 511:
            # Ctrl-C and kill both failed: the shell is wedged. A fresh session
            # loses cwd/env but keeps the sandbox usable.
            await self._restart_session()
            return CommandResult(output="(the shell did not respond to Ctrl-C and was restarted)", exit_code=None)
        observation = self._parse(BashObservation, status, body, "run_in_session")
        return CommandResult(output=observation.output, exit_code=None)

    async def _execute_unlocked(
        self,
        command: str | list[str],
        *,
        timeout: float | None,
        cwd: str | None,
        merge_stderr: bool = True,
        guard: bool = True,
    ) -> CommandResult:
        request_id = uuid.uuid4().hex
        script = command if isinstance(command, str) else shlex.join(command)
        if guard:
            # Same ledger claim as session commands: a re-sent request never runs twice.
            # The subshell lets the exit code be recorded even when the script calls `exit`.
            claim = shlex.quote(f"{self._ledger}/{request_id}")
            script = (
                f"{self._ensure_ledger()}\n"
                f"if mkdir {claim} 2>/dev/null; then\n(\n{script}\n)\n"
                f"__swerollout_rc=$?; {{ echo $__swerollout_rc > {claim}/rc; }} 2>/dev/null; exit $__swerollout_rc\n"
                f"else echo {_DUPLICATE_MARKER}; exit 1; fi"
            )
        request = Command(command=script, shell=True, timeout=timeout, cwd=cwd, merge_output_streams=merge_stderr)
        read_timeout = None if timeout is None else timeout + 30.0
        status, body = await self._post_raw("execute", request, request_id, read_timeout)
        if status == 511:
            if self._remote_class(body).endswith("CommandTimeoutError"):
                return CommandResult(output=self._remote_message(body), exit_code=None, timed_out=True)
            raise SandboxError(f"executing {str(command)[:200]!r}: {self._remote_message(body)}")
        response = self._parse(CommandResponse, status, body, "execute")
        if guard and response.stdout.startswith(_DUPLICATE_MARKER):
            return await self._recover_lost_result(request_id)
        if merge_stderr:
            return CommandResult(output=response.stdout + response.stderr, exit_code=response.exit_code)
        return CommandResult(output=response.stdout, stderr=response.stderr, exit_code=response.exit_code)

    async def _restart_session(self) -> None:
        # Closing a dead shell may fail; the new session is what matters. A shell that
        # is still registered, though, would be reattached to, wedged as it was.
        status, body = await self._end_session()
        if status != 200 and self._is_unkilled_shell(body):
            raise SandboxError(f"restarting bash session {self._session!r}: {self._remote_message(body)}")
        await self._open_session([])

    async def _end_session(self) -> tuple[int, Any]:
        """close_session, again while the shell outlives pexpect's wait for it.

        swe-rex waits 0.1 s after each signal, SIGKILL last, and then gives up with the
        session still registered; on a loaded node a killed process can take longer to go.
        """
        request = CloseBashSessionRequest(session=self._session)
        for pause in _UNKILLED_SHELL_PAUSES:
            status, body = await self._post_raw("close_session", request, uuid.uuid4().hex, 60.0)
            if status == 200 or not self._is_unkilled_shell(body):
                return status, body
            await asyncio.sleep(pause)
        return await self._post_raw("close_session", request, uuid.uuid4().hex, 60.0)

    @classmethod
    def _is_unkilled_shell(cls, body: Any) -> bool:
        return cls._remote_class(body).endswith(_UNKILLED_SHELL) and "terminate" in cls._remote_message(body)

    async def _open_session(self, startup_source: list[str]) -> None:
        request = CreateBashSessionRequest(session=self._session, startup_source=startup_source, startup_timeout=10.0)
        status, body = await self._post_raw("create_session", request, uuid.uuid4().hex, 60.0)
        if status == 511 and self._remote_class(body).endswith("SessionExistsError"):
            pass  # reattaching to a live shell, e.g. after an abort
        elif status != 200:
            raise SandboxError(f"creating bash session {self._session!r}: {self._remote_message(body)}")
        made = await self._execute_unlocked(["mkdir", "-p", self._ledger], timeout=30.0, cwd=None, guard=False)
        if made.exit_code != 0:
            raise SandboxError(
                f"cannot create the command ledger {self._ledger} in the sandbox ({made.output.strip()[:200]}); "
                "the sandbox needs a writable /tmp"
            )

    async def _wait_until_alive(self, timeout: float) -> None:
        # Pauses of 0.2 s at most (0.1 s on average, the fixed pause this replaced): a
        # sandbox's start waits on this, for `timeout` seconds in all.
        loop = ALIVE_POLL.model_copy(update={"budget_seconds": timeout}).retrying(
            retryable=lambda exc: isinstance(exc, _NotAlive)
        )
        try:
            async for attempt in loop:
                with attempt:
                    await self._check_alive()
        except _NotAlive as exc:
            raise SandboxUnavailableError(
                f"swerex-remote at {self._client.base_url} not alive after {timeout:.0f}s ({exc})"
            ) from None

    async def _check_alive(self) -> None:
        try:
            response = await self._client.get("/is_alive", timeout=5.0)
        except httpx.TransportError as exc:
            raise _NotAlive(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code == 401:
            raise SandboxAuthError(f"swerex-remote at {self._client.base_url} rejected the auth token")
        if response.status_code == 200 and response.json().get("is_alive") is True:
            return
        raise _NotAlive(f"HTTP {response.status_code}: {response.text[:200]}")

    async def _post(self, endpoint: str, payload: BaseModel) -> Any:
        status, body = await self._post_raw(endpoint, payload, uuid.uuid4().hex, 60.0)
        if status != 200:
            raise SandboxError(f"{endpoint}: {self._remote_message(body)}")
        return body

    async def _post_raw(
        self, endpoint: str, payload: BaseModel, request_id: str, read_timeout: float | None
    ) -> tuple[int, Any]:
        """POST with an idempotency key; re-send the SAME key after transport failures.

        Re-sending is safe because the server replays a finished request's
        answer for a repeated key, and session commands are guarded by the
        ledger claim (module docstring).
        """
        headers = {"X-Request-ID": request_id}
        timeout = httpx.Timeout(30.0, read=read_timeout)
        loop = self._retry.retrying(retryable=lambda exc: isinstance(exc, httpx.TransportError))
        try:
            async for attempt in loop:
                with attempt:
                    response = await self._client.post(
                        f"/{endpoint}", json=payload.model_dump(), headers=headers, timeout=timeout
                    )
        except httpx.TransportError as exc:
            raise SandboxUnavailableError(
                f"{endpoint} to swerex-remote at {self._client.base_url} failed {loop.schedule.retries + 1} times: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code == 401:
            raise SandboxAuthError(f"swerex-remote at {self._client.base_url} rejected the auth token")
        try:
            body = response.json()
        except ValueError as exc:
            raise SandboxProtocolError(
                f"{endpoint}: swerex-remote at {self._client.base_url} answered HTTP {response.status_code} "
                f"with non-JSON {response.text[:200]!r}; is the URL right?"
            ) from exc
        if response.status_code not in (200, 511):
            raise SandboxProtocolError(f"{endpoint}: HTTP {response.status_code}: {str(body)[:300]}")
        return response.status_code, body

    @staticmethod
    def _parse(model: type[_M], status: int, body: Any, endpoint: str) -> _M:
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise SandboxProtocolError(f"{endpoint}: unexpected answer (HTTP {status}): {exc}") from exc

    @staticmethod
    def _remote_class(body: Any) -> str:
        if isinstance(body, dict) and isinstance(body.get("swerexception"), dict):
            return str(body["swerexception"].get("class_path", ""))
        return ""

    @staticmethod
    def _remote_message(body: Any) -> str:
        if isinstance(body, dict) and isinstance(body.get("swerexception"), dict):
            exc = body["swerexception"]
            return f"{exc.get('class_path', '')}: {exc.get('message', '')}"
        return str(body)[:300]
