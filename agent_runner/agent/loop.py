"""The agent loop: ask the model for an action, run it in the sandbox, repeat.

Control flow is a small exception family (Submitted, LimitExceeded) caught in
one place, which turns every ending into an exit status (exit_status.py) and
autosubmits the working tree's diff after error exits.

Limits, following SWE-agent:
- max_turns counts model calls, requeries included -> exit_max_iter_out.
- A reply without a usable action, or with a blocked command, is answered with
  an error message (a requery); the (max_requeries+1)-th in a row -> exit_format.
- A command that exceeds command_timeout is interrupted and the model is told;
  max_consecutive_timeouts in a row -> exit_command_timeout.
- Summed command time over total_execution_time -> exit_total_execution_time
  (checked before each model call; model time is not counted).
- A reply cut off (finish_reason LENGTH) with the context budget spent, or the
  model refusing to generate because it is full -> exit_context.

An ABORT from the model (weight update, suspend) is not an ending: the loop
returns partial, with a LoopState that `resume` continues from exactly there.
"""

from __future__ import annotations

import inspect
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent_runner.agent.config import ActionFormat, AgentConfig
from agent_runner.agent.run_state import LoopResult, LoopState, StepInfo, TaskInfo
from agent_runner.agent.tools import (
    Action,
    BashAction,
    EditorAction,
    EditorError,
    FormatError,
    StrReplaceEditor,
    SubmitAction,
    blocked_command,
    parse_text_action,
    parse_tool_call,
)
from agent_runner.policy.errors import ContextBudgetError, ModelError
from agent_runner.policy.images import user_content
from agent_runner.policy.model import FinishReason, Model, ModelTurn
from agent_runner.sandbox import Sandbox, SandboxError
from swerollout.exit_status import ExitStatus, autosubmitted

__all__ = ["AgentLoop", "LimitExceeded", "LoopResult", "LoopState", "StepCallback", "StepInfo", "Submitted", "TaskInfo"]


class Submitted(Exception):
    """The agent submitted."""


class LimitExceeded(Exception):
    def __init__(self, status: ExitStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


StepCallback = Callable[[StepInfo], Awaitable[None] | None]


class AgentLoop:
    """One agent run over a Model and a Sandbox.

    `on_step` is called (and awaited if it returns an awaitable) after every
    step: an executed action or a requery. An exception it raises ends the run
    with exit_error, so a reporter that may fail should catch its own errors.
    Cancelling the task running the loop propagates (it is not an exit status).
    """

    def __init__(
        self,
        model: Model,
        sandbox: Sandbox,
        config: AgentConfig,
        task: TaskInfo,
        *,
        on_step: StepCallback | None = None,
        before_action: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.model = model
        self.before_action = before_action
        """Awaited before each action touches the sandbox (the checkpoint of the last
        boundary must have read the working tree first)."""
        self.sandbox = sandbox
        self.config = config
        self.task = task
        self.on_step = on_step
        self.state = LoopState()
        self._editor = StrReplaceEditor(sandbox, self.state.editor_history, working_dir=task.working_dir)
        self._pause_requested = False

    def request_pause(self) -> None:
        """End the run as partial at the next step boundary (before the next model call).

        For a suspend that arrives while a command runs: the runner calls this and
        aborts the in-flight generation (if any); either way the loop stops where
        `resume` can pick up exactly.
        """
        self._pause_requested = True

    async def run(self) -> LoopResult:
        return await self.resume(LoopState())

    async def prepare(self) -> None:
        """What the first turn needs before its model call: the shell, and the system and
        instance messages (tokenized by the model). `resume(self.state)` then starts with
        that model call, the warm start of a prepared rollout."""
        if not self.state.started:
            await self._start()

    async def resume(self, state: LoopState, *, fresh_sandbox: bool = False) -> LoopResult:
        """Continue from `state` (a fresh LoopState starts a new run). `fresh_sandbox`: the
        run moved to a new pod (a replay), whose shell is prepared again."""
        self.state = state.model_copy(deep=True)
        self._pause_requested = False
        self._editor = StrReplaceEditor(self.sandbox, self.state.editor_history, working_dir=self.task.working_dir)
        try:
            if not self.state.started:
                await self._start()
            elif fresh_sandbox:
                await self._prepare_shell()
            while True:
                turn = await self._next_turn()
                if turn is None:
                    return LoopResult(partial=True, exit_status=None, submission=None, state=self.state)
                await self._handle(turn)
        except Submitted:
            return await self._finish(ExitStatus.SUBMITTED, None)
        except LimitExceeded as exc:
            return await self._finish(exc.status, str(exc))
        except ContextBudgetError as exc:
            return await self._finish(ExitStatus.EXIT_CONTEXT, str(exc))
        except ModelError as exc:
            return await self._finish(ExitStatus.EXIT_API, f"{type(exc).__name__}: {exc}")
        except SandboxError as exc:
            return await self._finish(ExitStatus.EXIT_ENVIRONMENT_ERROR, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - every other failure is exit_error, with autosubmission
            return await self._finish(ExitStatus.EXIT_ERROR, f"{type(exc).__name__}: {exc}")

    # -- one step ----------------------------------------------------------

    async def _start(self) -> None:
        await self._prepare_shell()
        self.model.add_messages(
            [
                {"role": "system", "content": self._render("system_template")},
                {"role": "user", "content": user_content(self._render("instance_template"), self.task.issue_images)},
            ]
        )
        self.state.started = True

    async def _prepare_shell(self) -> None:
        exports = "".join(f" && export {name}={shlex.quote(value)}" for name, value in self.config.tools.env.items())
        prepared = await self.sandbox.run(f"cd {shlex.quote(self.task.working_dir)}{exports}", timeout=60)
        if prepared.exit_code != 0:
            raise SandboxError(f"cannot prepare the shell in {self.task.working_dir}: {prepared.output.strip()[:300]}")

    async def _next_turn(self) -> ModelTurn | None:
        """The model's next turn, or None when the run pauses (abort or request_pause)."""
        if self._pause_requested:
            return None
        limits = self.config.limits
        if self.state.turns >= limits.max_turns:
            raise LimitExceeded(ExitStatus.EXIT_MAX_ITER_OUT, f"reached max_turns={limits.max_turns}")
        if self.state.execution_seconds >= limits.total_execution_time:
            raise LimitExceeded(
                ExitStatus.EXIT_TOTAL_EXECUTION_TIME,
                f"commands ran {self.state.execution_seconds:.1f}s >= total_execution_time={limits.total_execution_time}",
            )
        turn = await self.model.generate()
        if turn.finish_reason == FinishReason.ABORT:
            return None
        self.state.turns += 1
        if turn.finish_reason == FinishReason.LENGTH and self._context_full():
            raise LimitExceeded(ExitStatus.EXIT_CONTEXT, f"context reached {self.model.context_tokens} tokens")
        return turn

    async def _handle(self, turn: ModelTurn) -> None:
        try:
            action = self._parse(turn)
        except FormatError as exc:
            self.state.requeries += 1
            if self.state.requeries > self.config.limits.max_requeries:
                raise LimitExceeded(
                    ExitStatus.EXIT_FORMAT, f"{self.state.requeries} unusable replies in a row: {exc}"
                ) from exc
            message = str(exc)
            self.model.add_messages(self._reply(turn, message))
            await self._report(StepInfo(state=self.state, action=None, observation=message))
            return
        self.state.requeries = 0
        if isinstance(action, SubmitAction):
            raise Submitted()
        if self.before_action is not None:
            await self.before_action()
        observation, exit_code, label = await self._execute(action)
        self.model.add_messages(self._reply(turn, observation))
        await self._report(StepInfo(state=self.state, action=label, observation=observation, exit_code=exit_code))

    def _parse(self, turn: ModelTurn) -> Action:
        tools = self.config.tools
        try:
            if tools.action_format == ActionFormat.TEXT_BASH:
                action = parse_text_action(turn.text)
            elif len(turn.tool_calls) != 1:
                raise FormatError(turn.parse_error or f"expected exactly one tool call, got {len(turn.tool_calls)}")
            else:
                action = parse_tool_call(turn.tool_calls[0], tools.enabled)
        except FormatError as exc:
            raise FormatError(self._render("format_error_template", error=str(exc))) from None
        if isinstance(action, BashAction) and blocked_command(
            action.command, tools.blocklist, tools.blocklist_standalone
        ):
            raise FormatError(self._render("blocklist_error_template", action=action.command.strip()))
        return action

    async def _execute(self, action: BashAction | EditorAction) -> tuple[str, int | None, str]:
        started = time.monotonic()
        try:
            if isinstance(action, EditorAction):
                label = f"str_replace_editor {action.command} {action.path}"
                # Editor messages say themselves whether they failed; no exit code line.
                try:
                    return self._observation(await self._editor.run(action), None), 0, label
                except EditorError as exc:
                    return self._observation(str(exc), None), 1, label
            result = await self.sandbox.run(action.command, timeout=self.config.limits.command_timeout)
        finally:
            self.state.execution_seconds += time.monotonic() - started
        if result.timed_out:
            self.state.consecutive_timeouts += 1
            if self.state.consecutive_timeouts >= self.config.limits.max_consecutive_timeouts:
                raise LimitExceeded(
                    ExitStatus.EXIT_COMMAND_TIMEOUT, f"{self.state.consecutive_timeouts} commands in a row timed out"
                )
            text = self._render(
                "command_timeout_template", command=action.command, timeout=self.config.limits.command_timeout
            )
            return text, None, action.command
        self.state.consecutive_timeouts = 0
        return self._observation(result.output, result.exit_code), result.exit_code, action.command

    def _observation(self, output: str, exit_code: int | None) -> str:
        limit = self.config.tools.max_observation_chars
        if not output.strip():
            return self._render("next_step_no_output_template", exit_code=exit_code)
        if len(output) > limit:
            return self._render(
                "truncated_observation_template",
                observation=output[:limit],
                elided_chars=len(output) - limit,
                max_observation_chars=limit,
            )
        return self._render("next_step_template", observation=output, exit_code=exit_code)

    def _reply(self, turn: ModelTurn, content: str) -> list[dict[str, Any]]:
        """Function calls are answered per call id (chat templates expect it); text turns by a user message."""
        if self.config.tools.action_format == ActionFormat.FUNCTION_CALLING and turn.tool_calls:
            return [{"role": "tool", "tool_call_id": call.id, "content": content} for call in turn.tool_calls]
        return [{"role": "user", "content": content}]

    # -- endings -----------------------------------------------------------

    async def _finish(self, status: ExitStatus, error: str | None) -> LoopResult:
        submission = await self._diff()
        final = status.value
        if status != ExitStatus.SUBMITTED and submission:
            final = autosubmitted(status)
        return LoopResult(partial=False, exit_status=final, submission=submission, state=self.state, error=error)

    async def _diff(self) -> str | None:
        """`git add -A && git diff --cached <base>`: the patch of the working tree (None if unreadable)."""
        base = shlex.quote(self.task.base_commit)
        try:
            result = await self.sandbox.execute(
                f"git add -A && git -c core.fileMode=false diff --cached --no-color {base}",
                cwd=self.task.working_dir,
                timeout=120,
                merge_stderr=False,
            )
        except SandboxError:
            return None
        return result.output if result.exit_code == 0 else None

    # -- helpers -----------------------------------------------------------

    def _context_full(self) -> bool:
        budget = self.config.limits.max_context_tokens
        return budget is not None and self.model.context_tokens >= budget

    def _render(self, template: str, **variables: Any) -> str:
        return self.config.render(template, {**self.task.template_variables(), **variables})

    async def _report(self, info: StepInfo) -> None:
        if self.on_step is None:
            return
        outcome = self.on_step(info.model_copy(deep=True))
        if inspect.isawaitable(outcome):
            await outcome
