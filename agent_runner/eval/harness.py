"""Eval mode: grade a candidate patch in a fresh sandbox and compute the reward.

The eval pod's sandbox is a fresh checkout of the task at its base commit, served by
its own swerex-remote. `evaluate` then does what SWE-bench's harness does:

1. write the candidate patch into the sandbox as a file (never on a command line:
   a patch over ~128 KiB is longer than one argument may be, pain point 11) and apply
   it with the same fallback chain as SWE-bench: ``git apply``, ``--3way``,
   ``--reject``, then ``patch --fuzz=5``, resetting the tree between attempts;
2. reset the files the test patch touches to the base commit (the candidate may have
   edited them) and apply the test patch;
3. run the eval script under a timeout, output to a file;
4. grade the output with `agent_runner.eval.grading` (swebench's harness when installed).

Anything that stops grading (empty patch, patch does not apply, timeout, no test
output) gives an unresolved report with reward 0 and a `failure` that says why.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

from swerollout.api.v1alpha1 import Evaluation, Instance, RewardStatus
from swerollout.exit_status import GateDecision

from .grading import Backend, GradingError, GroupOutcome, LogGrade, ParserDisagreement, first_error_line, grade_log

__all__ = [
    "APPLY_COMMANDS",
    "EvalFailure",
    "EvalReport",
    "EvalRequest",
    "EvalSandbox",
    "default_eval_script",
    "evaluate",
    "files_in_patch",
    "skipped_report",
]

# SWE-bench's order (swebench.harness.run_evaluation.GIT_APPLY_CMDS); the patch file is appended.
# One addition: `patch` must not leave `*.orig` backups of fuzzed files in the tree.
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 --no-backup-if-mismatch -p1 -i",
)
# How much of a command's or the eval's output a report keeps (the tail matters most).
_APPLY_OUTPUT_CHARS = 4_000
_LOG_CHARS = 256 * 1024


class CommandOutcome(Protocol):
    output: str
    exit_code: int | None
    timed_out: bool


class EvalSandbox(Protocol):
    """What eval mode needs from a sandbox (agent_runner.sandbox.Sandbox provides it)."""

    async def execute(
        self, command: str | list[str], *, timeout: float | None = None, cwd: str | None = None
    ) -> CommandOutcome: ...

    async def read_file(self, path: str) -> str: ...

    async def write_file(self, path: str, content: str) -> None:
        """Write `content` to `path`, creating its parent directories."""
        ...


class EvalFailure(str, enum.Enum):
    """Why a candidate was not graded by its tests (always reward 0)."""

    EMPTY_PATCH = "EmptyPatch"
    """The candidate patch has no changes."""
    PATCH_APPLY_FAILED = "PatchApplyFailed"
    """No method in APPLY_COMMANDS applied the candidate patch."""
    TEST_PATCH_APPLY_FAILED = "TestPatchApplyFailed"
    """The instance's test patch did not apply: a broken instance, not the policy's fault."""
    EVAL_TIMEOUT = "EvalTimeout"
    """The eval script ran longer than the timeout and was killed."""
    NO_TEST_OUTPUT = "NoTestOutput"
    """The eval output could not be graded (markers or test results missing)."""
    NOT_GRADED = "NotGraded"
    """Exit-status gating skipped the evaluation."""


class EvalRequest(BaseModel):
    """One evaluation: an instance and the patch a rollout produced."""

    model_config = ConfigDict(extra="forbid")

    instance: Instance
    """The task (SWERollout spec.instance)."""
    patch: str = Field(default="", max_length=64 * 1024 * 1024)
    """The candidate patch (unified diff, as `git diff` prints it); may be empty."""
    workdir: str | None = Field(default=None, pattern=r"^/")
    """The repository inside the sandbox; default `instance.workdir` (dev mode passes its checkout)."""
    timeout_seconds: float = Field(default=1800.0, gt=0, le=86400)
    """Limit of the eval script (seconds); the whole evaluation takes a little longer."""
    grader: Backend = "auto"
    """``auto``: swebench's harness when importable, else builtin."""


class EvalReport(BaseModel):
    """The graded outcome of one evaluation."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    resolved: bool
    reward: float
    """1.0 when resolved, else 0.0."""
    graded: bool = True
    """False when exit-status gating skipped the evaluation."""
    failure: EvalFailure | None = None
    """Set when the tests could not decide (see EvalFailure); None when they ran and were graded."""
    message: str = ""
    """One human-readable line: why it failed, or the pass counts."""
    patch_applied: bool = False
    apply_method: str | None = None
    """Which command of APPLY_COMMANDS applied the patch (or ``already applied``)."""
    apply_output: str = ""
    """Tail of the apply command's output (of the last attempt when all failed)."""
    backend: str | None = None
    """Which grader ran: ``swebench <version>`` or ``builtin``."""
    parser: str | None = None
    tests: dict[str, str] = Field(default_factory=dict)
    """Every test id the parser found -> status."""
    fail_to_pass: GroupOutcome = Field(default_factory=GroupOutcome)
    pass_to_pass: GroupOutcome = Field(default_factory=GroupOutcome)
    parser_disagreements: list[ParserDisagreement] = Field(default_factory=list)
    """Known test ids the log parser misread (e.g. cut at a space); they were graded by exact match."""
    eval_exit_code: int | None = None
    test_output: str = ""
    """Tail of the eval script's output."""
    tests_seconds: float | None = None
    """Wall time of the eval script (the tests' own time); None when it did not run."""

    def to_reward_status(self) -> RewardStatus:
        """The summary that goes into SWERollout status.reward (the full report goes to the result store)."""
        return RewardStatus(
            value=self.reward,
            resolved=self.resolved,
            graded=self.graded,
            fail_to_pass_passed=len(self.fail_to_pass.success),
            fail_to_pass_total=self.fail_to_pass.total,
            pass_to_pass_passed=len(self.pass_to_pass.success),
            pass_to_pass_total=self.pass_to_pass.total,
            message=self.message[:1024],
            tests_seconds=self.tests_seconds,
        )


def _all_failed(evaluation: Evaluation) -> tuple[GroupOutcome, GroupOutcome]:
    return GroupOutcome(failure=list(evaluation.fail_to_pass)), GroupOutcome(failure=list(evaluation.pass_to_pass))


def skipped_report(instance: Instance, decision: GateDecision) -> EvalReport:
    """Reward 0 without evaluation, for an exit status that gating does not grade."""
    f2p, p2p = _all_failed(instance.evaluation)
    return EvalReport(
        instance_id=instance.instance_id,
        resolved=False,
        reward=0.0,
        graded=False,
        failure=EvalFailure.NOT_GRADED,
        message=decision.reason,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
    )


def files_in_patch(patch: str) -> list[str]:
    """Paths a git-style unified diff touches (both sides of renames and copies), in order, unique.

    Reads the ``---``/``+++`` lines, rename/copy lines and, for mode-only or binary
    changes, the ``diff --git a/P b/P`` header (split in the middle, so paths with
    spaces work). C-quoted paths (git's form for unusual characters) are left quoted.
    """
    seen: dict[str, None] = {}
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            rest = line[len("diff --git ") :]
            half = (len(rest) - 1) // 2
            old, new = rest[:half], rest[half + 1 :]
            if old.startswith("a/") and new.startswith("b/") and old[2:] == new[2:]:
                seen.setdefault(old[2:])
        elif line.startswith(("--- a/", "+++ b/")):
            seen.setdefault(line[len("--- a/") :].split("\t", 1)[0])
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            seen.setdefault(line.split(" ", 2)[2])
    return list(seen)


def default_eval_script(evaluation: Evaluation) -> str:
    """For instances without an eval script: pytest -rA on the files of the named tests."""
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in [*evaluation.fail_to_pass, *evaluation.pass_to_pass]))
    if not files:
        raise GradingError("the instance has neither an eval script nor FAIL_TO_PASS/PASS_TO_PASS tests to run")
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uo pipefail",
            "export PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1",
            'echo ">>>>> Start Test Output"',
            "python -m pytest -rA --tb=short -p no:cacheprovider " + " ".join(shlex.quote(f) for f in files),
            "SWEBENCH_TEST_EXIT_CODE=$?",
            'echo ">>>>> End Test Output"',
            'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"',
            "",
        ]
    )


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "...(truncated)...\n" + text[-limit:]


class _Evaluation:
    """One evaluation's steps against one sandbox; `run` is the only entry point."""

    def __init__(self, sandbox: EvalSandbox, request: EvalRequest, on_step: Callable[[str], None]) -> None:
        self.sandbox = sandbox
        self.request = request
        self.on_step = on_step
        self.instance = request.instance
        self.workdir = request.workdir or request.instance.workdir
        self.scratch = ""

    async def sh(self, command: str, *, timeout: float = 120.0) -> CommandOutcome:
        return await self.sandbox.execute(["bash", "-c", command], timeout=timeout, cwd=self.workdir)

    def unresolved(self, failure: EvalFailure, message: str, **fields: object) -> EvalReport:
        f2p, p2p = _all_failed(self.instance.evaluation)
        report = EvalReport(
            instance_id=self.instance.instance_id,
            resolved=False,
            reward=0.0,
            failure=failure,
            message=message,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
        )
        return report.model_copy(update=fields)

    async def run(self) -> EvalReport:
        # A name nothing else in the fresh sandbox can guess; the sandbox's write_file makes the
        # directory with the first file in it (one sandbox call fewer before the tests than a
        # mktemp: each is a round trip on the reward's critical path).
        self.scratch = f"/tmp/swerollout-eval.{secrets.token_hex(8)}"
        try:
            return await self._run()
        finally:
            await self.sandbox.execute(["rm", "-rf", self.scratch], timeout=60.0)

    async def _run(self) -> EvalReport:
        if not self.request.patch.strip():
            return self.unresolved(EvalFailure.EMPTY_PATCH, "the candidate patch is empty; nothing to evaluate")
        await self._write_candidate()
        test_steps = await self._test_patch_steps()
        both = await self._apply_both(test_steps)
        method: str | None
        test_patch_error: str | None = None
        if both is not None:
            method, output, test_patch_error = both
            applied = True
        else:
            applied, method, output = await self._apply_candidate(first=1)
        if not applied:
            first_error = next((line for line in output.splitlines() if "error" in line.lower()), output.strip()[:200])
            return self.unresolved(
                EvalFailure.PATCH_APPLY_FAILED,
                f"the candidate patch does not apply to {self.instance.base_commit[:12]} "
                f"with any of {len(APPLY_COMMANDS)} methods: {first_error}",
                apply_output=_tail(output, _APPLY_OUTPUT_CHARS),
            )
        applied_fields: dict[str, object] = {
            "patch_applied": True,
            "apply_method": method,
            "apply_output": _tail(output, _APPLY_OUTPUT_CHARS),
        }
        if both is None:
            test_patch_error = await self._apply_test_patch(test_steps)
        if test_patch_error is not None:
            return self.unresolved(EvalFailure.TEST_PATCH_APPLY_FAILED, test_patch_error, **applied_fields)
        self.on_step("applied")
        started = time.monotonic()
        log, exit_code, timed_out = await self._run_eval_script()
        applied_fields["tests_seconds"] = round(time.monotonic() - started, 3)
        self.on_step("tests")
        if timed_out:
            return self.unresolved(
                EvalFailure.EVAL_TIMEOUT,
                f"the eval script did not finish within {self.request.timeout_seconds:g}s and was killed",
                test_output=_tail(log, _LOG_CHARS),
                eval_exit_code=exit_code,
                **applied_fields,
            )
        evaluation = self.instance.evaluation
        grade: LogGrade = grade_log(
            log,
            instance_id=self.instance.instance_id,
            repo=self.instance.repo,
            fail_to_pass=evaluation.fail_to_pass,
            pass_to_pass=evaluation.pass_to_pass,
            log_parser=evaluation.log_parser.value,
            eval_type=evaluation.eval_type.value,
            backend=self.request.grader,
        )
        self.on_step("graded")
        graded_fields = {
            **applied_fields,
            "backend": grade.backend,
            "parser": grade.parser,
            "test_output": _tail(log, _LOG_CHARS),
            "eval_exit_code": exit_code,
        }
        if grade.problem is not None:
            return self.unresolved(EvalFailure.NO_TEST_OUTPUT, grade.problem, **graded_fields)
        f2p, p2p = grade.fail_to_pass, grade.pass_to_pass
        note = grade.disagreement_note()
        if not grade.resolved and not any(
            t in grade.tests for t in [*evaluation.fail_to_pass, *evaluation.pass_to_pass]
        ):
            # No graded test ran at all (a collection error: a module the tests import is
            # missing): the reason is in the output, not in the counts.
            error = first_error_line(log)
            note = "; ".join(
                part for part in (note, f"no graded test ran; first error: {error}" if error else "") if part
            )
        return EvalReport(
            instance_id=self.instance.instance_id,
            resolved=grade.resolved,
            reward=1.0 if grade.resolved else 0.0,
            message=(
                f"{'resolved' if grade.resolved else 'not resolved'}: FAIL_TO_PASS {len(f2p.success)}/{f2p.total}, "
                f"PASS_TO_PASS {len(p2p.success)}/{p2p.total} ({grade.backend})" + (f"; {note}" if note else "")
            ),
            parser_disagreements=grade.disagreements,
            tests=grade.tests,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            **graded_fields,  # type: ignore[arg-type]
        )

    @property
    def _candidate_file(self) -> str:
        return f"{self.scratch}/candidate.diff"

    async def _apply_both(self, test_steps: list[_Step]) -> tuple[str, str, str | None] | None:
        """The usual case in one sandbox command (each is a round trip on the reward's
        critical path): the candidate with the first of APPLY_COMMANDS, then the test patch.
        (the method, its output, the test patch's error or None) once the candidate applied;
        None when the first method failed, and the other methods are left to _apply_candidate.
        The sections of the output are split by a line the patches cannot know (the scratch
        directory's random name)."""
        candidate_step = f"{APPLY_COMMANDS[0]} {shlex.quote(self._candidate_file)} || exit"
        marker = f"__SWEROLLOUT_STEP_{self.scratch.rsplit('.', 1)[-1]}__"
        script = f"\nbuiltin echo {marker}\n".join([candidate_step, *(step.command for step in test_steps)])
        result = await self.sh(script + "\n")
        sections = _sections(result.output, marker)
        candidate = sections[0]
        if len(sections) == 1 and result.exit_code != 0:
            return None
        if result.exit_code == 0:
            return APPLY_COMMANDS[0], candidate, None
        # The script stops at the failing step: its section is the last one printed.
        failed = test_steps[len(sections) - 2]
        return APPLY_COMMANDS[0], candidate, failed.failure(sections[-1])

    async def _write_candidate(self) -> None:
        # A patch must end with a newline or git calls it corrupt.
        patch = self.request.patch if self.request.patch.endswith("\n") else self.request.patch + "\n"
        await self.sandbox.write_file(self._candidate_file, patch)

    async def _test_patch_steps(self) -> list[_Step]:
        """The shell steps that put the instance's test patch in place (its files reset to the
        base commit first), each ending the script with its status when it fails. Their files
        are written here, once, for whichever path runs them."""
        test_patch = self.instance.evaluation.test_patch
        if not test_patch.strip():
            return []
        steps = []
        paths = files_in_patch(test_patch)
        if paths:
            # Remove every file the test patch touches, then restore those that exist at
            # the base commit. Paths travel in a NUL-separated file and xargs batches
            # them: a test patch may touch thousands of files, more than one command
            # line (or one 128 KiB argument) can hold.
            paths_file = f"{self.scratch}/test-paths"
            existing_file = f"{self.scratch}/test-paths-at-base"
            await self.sandbox.write_file(paths_file, "\0".join(paths) + "\0")
            base = shlex.quote(self.instance.base_commit)
            git = "git --literal-pathspecs"
            listed, existing = shlex.quote(paths_file), shlex.quote(existing_file)
            # && and not set -e: the step is the left side of `|| exit`, where bash ignores -e.
            steps.append(
                _Step(
                    f"xargs -0 -r rm -f -- < {listed} && "
                    f"xargs -0 -r {git} ls-tree -r -z --name-only {base} -- < {listed} > {existing} && "
                    f"xargs -0 -r {git} checkout {base} -- < {existing} || exit",
                    lambda output: _reset_failed(self.instance.base_commit, output),
                )
            )
        patch_file = f"{self.scratch}/test.diff"
        await self.sandbox.write_file(patch_file, test_patch if test_patch.endswith("\n") else test_patch + "\n")
        steps.append(_Step(f"git apply --verbose {shlex.quote(patch_file)}", _test_patch_failed))
        return steps

    async def _apply_candidate(self, first: int = 0) -> tuple[bool, str | None, str]:
        """The candidate (already written) with APPLY_COMMANDS from `first` on, until one applies."""
        patch_file = self._candidate_file
        output = ""
        for attempt, command in enumerate(APPLY_COMMANDS[first:], start=first):
            if attempt:
                # A failed attempt (notably --reject) leaves partial edits and .rej files.
                await self.sh("git checkout -- . && git clean -fdq")
            result = await self.sh(f"{command} {shlex.quote(patch_file)}")
            output = result.output
            if result.exit_code == 0:
                return True, command, output
        await self.sh("git checkout -- . && git clean -fdq")
        reverse = await self.sh(f"git apply --check --reverse {shlex.quote(patch_file)}")
        if reverse.exit_code == 0:
            # The tree already contains the change (SWE-bench counts this as applied).
            return True, "already applied", output
        return False, None, output

    async def _apply_test_patch(self, steps: list[_Step]) -> str | None:
        """After a fallback method applied the candidate: the test patch's steps, one by one."""
        for step in steps:
            result = await self.sh(step.command)
            if result.exit_code != 0:
                return step.failure(result.output)
        return None

    async def _run_eval_script(self) -> tuple[str, int | None, bool]:
        evaluation = self.instance.evaluation
        script = evaluation.eval_script or default_eval_script(evaluation)
        script_file = f"{self.scratch}/eval.sh"
        log_file = f"{self.scratch}/eval.log"
        await self.sandbox.write_file(script_file, script)
        limit = self.request.timeout_seconds
        # coreutils timeout kills the whole script even if the sandbox call is cut off;
        # the sandbox-side limit is only a backstop. Output goes to a file so a killed
        # run still leaves what it printed.
        command = f"timeout --kill-after=10 {limit:g} bash {shlex.quote(script_file)} > {shlex.quote(log_file)} 2>&1"
        result = await self.sh(command, timeout=limit + 60.0)
        try:
            log = await self.sandbox.read_file(log_file)
        except FileNotFoundError:
            log = result.output
        timed_out = result.timed_out or result.exit_code in (124, 137)
        return log, result.exit_code, timed_out


class _Step(NamedTuple):
    """One shell step of the eval, and the message its failure's output makes."""

    command: str
    failure: Callable[[str], str]


def _sections(output: str, marker: str) -> list[str]:
    """`output` cut at each line that is `marker` (the marker lines dropped)."""
    sections: list[list[str]] = [[]]
    for line in output.splitlines(keepends=True):
        if line.rstrip("\r\n") == marker:
            sections.append([])
        else:
            sections[-1].append(line)
    return ["".join(lines) for lines in sections]


def _reset_failed(base_commit: str, output: str) -> str:
    return f"resetting the test files to {base_commit[:12]} failed: {output.strip()[:500]}"


def _test_patch_failed(output: str) -> str:
    return f"the instance's test patch does not apply (broken instance?): {output.strip()[:500]}"


def _no_step(step: str) -> None:
    pass


async def evaluate(
    sandbox: EvalSandbox, request: EvalRequest, *, on_step: Callable[[str], None] = _no_step
) -> EvalReport:
    """Apply the candidate and test patches in `sandbox` (a fresh checkout), run the eval script, grade it.

    `on_step(name)` is called as each step is done: ``applied`` (both patches), ``tests``
    (the eval script ended), ``graded`` (the eval pod's timeline, agent_runner.pod.eval_timeline)."""
    return await _Evaluation(sandbox, request, on_step).run()


async def _evaluate_at(url: str, token: str, request: EvalRequest) -> EvalReport:
    # Imported here so the pure parts of this module need no HTTP stack.
    from agent_runner.sandbox import Sandbox

    sandbox = await Sandbox.connect(url, token, timeout=120.0)
    try:
        return await evaluate(sandbox, request)
    finally:
        await sandbox.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_runner.eval``: the eval pod's entry point until the runner's main loop hands it work.

    Prints the report as JSON (or writes it to --out). Exit 0 when a report was made,
    whatever the verdict; 2 when the evaluation itself could not run.
    """
    parser = argparse.ArgumentParser(prog="python -m agent_runner.eval", description=main.__doc__)
    parser.add_argument("--request", type=Path, required=True, help="EvalRequest JSON file")
    parser.add_argument("--sandbox-url", required=True, help="swerex-remote of the fresh eval sandbox")
    parser.add_argument("--token-file", type=Path, required=True, help="file holding swerex-remote's auth token")
    parser.add_argument("--out", type=Path, help="write the report here instead of stdout")
    args = parser.parse_args(argv)
    try:
        request = EvalRequest.model_validate_json(args.request.read_text())
        token = args.token_file.read_text().strip()
        report = asyncio.run(_evaluate_at(args.sandbox_url, token, request))
    except Exception as exc:  # the CLI boundary: every failure becomes one clear line
        print(f"error: evaluation did not run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    text = report.model_dump_json(indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    print(report.message, file=sys.stderr)
    return 0
