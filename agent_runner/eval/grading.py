"""Turn an eval script's output into per-test statuses and a resolved verdict.

Two backends with the same behaviour:

- ``swebench``: SWE-bench's own harness code (an optional extra, imported lazily):
  its ``PARSER_REGISTRY`` picks the log parser by the instance's ``log_parser`` name
  (swebench 5 no longer maps repo -> parser; the instance carries the parser name),
  ``get_logs_eval`` cuts the output between the start/end markers and parses it, and
  ``get_eval_tests_report`` + ``get_resolution_status`` decide FAIL_TO_PASS /
  PASS_TO_PASS success and ``RESOLVED_FULL``. Using the harness itself avoids the
  "our grader disagrees with the leaderboard's" class of bugs.
- ``builtin``: our own pytest ``-rA`` parser and the same grading rules, used when
  swebench is not installed (or when asked for).

Both parse every line the same way (pytest's ``-rA`` summary is split at whitespace),
which cuts an id with a space in its parameters (``tests/t.py::test_y[two words]``) and
so grades a correct fix as wrong. The instance names the ids it expects, though, so
every known FAIL_TO_PASS / PASS_TO_PASS id is also looked for whole in the summary
lines (``STATUS <id>`` or ``STATUS <id> - <message>``); where found, that status wins,
and each id where the parser read something else is listed in ``disagreements``.
``swerollout.testids`` holds the rule for ids no log can show (warned about at load).

Grading rules (SWE-bench's): a FAIL_TO_PASS test succeeds when PASSED or XFAIL; it
fails when FAILED, ERROR, SKIPPED or missing. A PASS_TO_PASS test is also kept when
SKIPPED. ``fail_only`` grading fails a test only when it is FAILED. Resolved means every
FAIL_TO_PASS and every PASS_TO_PASS test succeeded.
"""

from __future__ import annotations

import enum
import functools
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "END_TEST_OUTPUT",
    "START_TEST_OUTPUT",
    "TEST_EXIT_CODE",
    "Backend",
    "GradingError",
    "GroupOutcome",
    "LogGrade",
    "ParserDisagreement",
    "TestStatus",
    "first_error_line",
    "grade_log",
    "match_known_tests",
    "parse_pytest_log",
    "swebench_harness_problem",
    "swebench_version",
]

# SWE-bench's markers (swebench.harness.constants); a test checks they still match.
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"

Backend = Literal["auto", "swebench", "builtin"]


class GradingError(Exception):
    """The output cannot be graded with the requested parser (not retryable: fix the instance)."""


class TestStatus(str, enum.Enum):
    PASSED = "PASSED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


_PASSING = {TestStatus.PASSED.value, TestStatus.XFAIL.value}
_SKIP_SUMMARY = re.compile(r"^\[\d+\]$")
_EXIT_CODE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")
# Evidence that pytest ran even when nothing was parsed (e.g. "no tests ran" is not it).
_PYTEST_RAN = re.compile(r"=+ .*\b[1-9]\d* (passed|failed|error|errors|skipped|xfailed)\b", re.M)


def parse_pytest_log(log: str) -> dict[str, str]:
    """Test id -> status from pytest's ``-rA`` short summary lines (``PASSED tests/x.py::t``).

    Same reading as swebench's ``parse_log_pytest``: ``FAILED id - message`` keeps only
    the id, an id is cut at its first space, and ``SKIPPED [2] file:line: reason`` lines
    (pytest's grouped skip summaries) are not tests. Coloured output is not understood
    (nor is it by swebench's parser): eval scripts run pytest without a terminal.
    """
    statuses: dict[str, str] = {}
    known = {s.value for s in TestStatus}
    for line in log.splitlines():
        if not line.startswith(tuple(known)):
            continue
        if line.startswith(TestStatus.FAILED.value):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) < 2 or words[0] not in known:
            continue
        status, name = words[0], words[1]
        if status == TestStatus.SKIPPED.value and _SKIP_SUMMARY.match(name):
            continue
        statuses[name] = status
    return statuses


def match_known_tests(log: str, test_ids: Iterable[str]) -> dict[str, str]:
    """Status of each known test id that a summary line names whole.

    A line ``STATUS <id>`` or ``STATUS <id> - <message>`` (pytest's ``-rA`` summary) names
    ``<id>`` exactly, spaces and brackets included. When two known ids both fit a line
    the longer wins (``t[a - b]`` over ``t[a``); a later line for the same id wins, as
    in swebench's parsers.
    """
    statuses = {s.value for s in TestStatus}
    by_head: dict[str, list[str]] = {}
    for test in set(test_ids):
        by_head.setdefault(test.split(" ", 1)[0], []).append(test)
    for candidates in by_head.values():
        candidates.sort(key=len, reverse=True)
    found: dict[str, str] = {}
    for line in log.splitlines():
        status, space, rest = line.rstrip().partition(" ")
        if not space or status not in statuses:
            continue
        for test in by_head.get(rest.split(" ", 1)[0], ()):
            if rest == test or rest.startswith(test + " - "):
                found[test] = status
                break
    return found


class ParserDisagreement(BaseModel):
    """A known test id the log parser read differently from the exact match (which was used)."""

    model_config = ConfigDict(extra="forbid")

    test: str
    parser_status: str | None
    """What the parser reported for this id (None: not at all, e.g. it cut the id at a space)."""
    exact_status: str


def _with_exact_matches(
    log: str, statuses: dict[str, str], known: Sequence[str]
) -> tuple[dict[str, str], list[ParserDisagreement]]:
    section = log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0] if START_TEST_OUTPUT in log else log
    exact = match_known_tests(section, known) or match_known_tests(log, known)
    disagreements = [
        ParserDisagreement(test=test, parser_status=statuses.get(test), exact_status=status)
        for test, status in sorted(exact.items())
        if statuses.get(test) != status
    ]
    return {**statuses, **exact}, disagreements


_BUILTIN_PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    "parse_log_pytest": parse_pytest_log,
}


class GroupOutcome(BaseModel):
    """Which tests of FAIL_TO_PASS or PASS_TO_PASS succeeded."""

    model_config = ConfigDict(extra="forbid")

    success: list[str] = Field(default_factory=list)
    failure: list[str] = Field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.success) + len(self.failure)


class LogGrade(BaseModel):
    """The graded eval output."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    """Which code graded it: ``swebench <version>`` or ``builtin``."""
    parser: str
    """The log parser's name (SWE-bench naming, e.g. ``parse_log_pytest``)."""
    tests: dict[str, str]
    """Every parsed test id -> PASSED / FAILED / SKIPPED / ERROR / XFAIL (known ids as matched exactly)."""
    fail_to_pass: GroupOutcome
    pass_to_pass: GroupOutcome
    resolved: bool
    problem: str | None = None
    """Why the output could not be graded (then nothing is resolved)."""
    disagreements: list[ParserDisagreement] = Field(default_factory=list)
    """Known ids the parser read differently from the exact match; the exact match was graded."""

    def disagreement_note(self) -> str:
        """One line for the report, empty when the parser and the exact match agree."""
        if not self.disagreements:
            return ""
        shown = ", ".join(
            f"{d.test} ({d.parser_status or 'not found'} -> {d.exact_status})" for d in self.disagreements[:5]
        )
        more = f" and {len(self.disagreements) - 5} more" if len(self.disagreements) > 5 else ""
        return (
            f"{self.parser} ({self.backend}) misread {len(self.disagreements)} known test id(s), graded by exact match: "
            f"{shown}{more}"
        )


def swebench_version() -> str | None:
    """The installed swebench's version, or None when the optional extra is missing."""
    try:
        import swebench
    except ImportError:
        return None
    return str(getattr(swebench, "__version__", "unknown"))


@functools.cache
def swebench_harness_problem() -> str | None:
    """None when swebench's grading code imports, else why not.

    ``swebench.harness`` imports docker, datasets and modal eagerly (about 5 s on a small
    machine, and an ImportError when one of them is missing), so this runs once per
    process and only when something is graded.
    """
    if swebench_version() is None:
        return "swebench is not installed (pip install swerollout[eval])"
    try:
        import swebench.harness.grading  # noqa: F401
    except Exception as exc:  # any optional dependency of the harness may be broken
        return (
            f"swebench {swebench_version()} is installed but its harness does not import: {type(exc).__name__}: {exc}"
        )
    return None


# An exception stated with its message (pytest's "E   ModuleNotFoundError: No module named 'x'"),
# else any line that says error; the markers are ours, never the error.
_EXCEPTION_LINE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b: ")
_ERROR_WORD = re.compile(r"\b(?:error|fatal)\b", re.I)
_ERROR_LINE_CHARS = 200


def first_error_line(log: str) -> str | None:
    """The first line of an eval output that states an error, else the first line of its test
    output (``python: No module named pytest``), as one printable line of at most 200
    characters (the output is the patched code's, so hostile text: shown, never parsed)."""
    lines = [line.strip() for line in log.splitlines() if not line.startswith(">>>>>")]
    found = next((line for pattern in (_EXCEPTION_LINE, _ERROR_WORD) for line in lines if pattern.search(line)), None)
    if found is None and START_TEST_OUTPUT in log:
        section = log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
        found = next((line.strip() for line in section.splitlines() if line.strip()), None)
    if found is None:
        return None
    shown = "".join(c if c.isprintable() else " " for c in re.sub(r"^E\s+", "", found))
    return shown[:_ERROR_LINE_CHARS] + ("..." if len(shown) > _ERROR_LINE_CHARS else "")


def _exit_code(log: str) -> int | None:
    match = _EXIT_CODE.search(log)
    return int(match.group(1)) if match else None


def _builtin_status_map(log: str, parse: Callable[[str], dict[str, str]]) -> tuple[dict[str, str], str | None]:
    """The same steps as swebench's get_logs_eval, with a reason when the log is unusable."""
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return {}, f"the eval output lacks the {START_TEST_OUTPUT!r} / {END_TEST_OUTPUT!r} markers"
    sliced = log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    statuses = parse(sliced) or parse(log)
    if not statuses and not _PYTEST_RAN.search(log):
        error = first_error_line(log)
        return {}, "the eval output has no test results (did the test command run?)" + (
            f"; its first error: {error}" if error else ""
        )
    exit_code = _exit_code(log)
    failing = {TestStatus.FAILED.value, TestStatus.ERROR.value}
    if exit_code not in (None, 0) and statuses and not failing & set(statuses.values()):
        # A patch can print fake PASSED lines; the real exit status says otherwise.
        return {}, f"the test command exited with {exit_code} but the output reports no failure"
    return statuses, None


def _builtin_report(
    statuses: dict[str, str], fail_to_pass: Sequence[str], pass_to_pass: Sequence[str], eval_type: str
) -> tuple[GroupOutcome, GroupOutcome]:
    def outcome(tests: Sequence[str], *, keep_skipped: bool) -> GroupOutcome:
        result = GroupOutcome()
        for test in tests:
            status = statuses.get(test)
            if eval_type == "fail_only":
                ok = status != TestStatus.FAILED.value
            else:
                ok = status in _PASSING or (keep_skipped and status == TestStatus.SKIPPED.value)
            (result.success if ok else result.failure).append(test)
        return result

    return outcome(fail_to_pass, keep_skipped=False), outcome(pass_to_pass, keep_skipped=True)


def _resolved(f2p: GroupOutcome, p2p: GroupOutcome) -> bool:
    return not f2p.failure and not p2p.failure


@dataclass(frozen=True)
class _GradeInput:
    instance_id: str
    repo: str
    log_parser: str
    eval_type: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]


def _grade_with_swebench(log: str, spec: _GradeInput) -> LogGrade:
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.types import TestSpec

    if spec.log_parser not in PARSER_REGISTRY:
        raise GradingError(
            f"swebench has no log parser {spec.log_parser!r}; known: {', '.join(sorted(PARSER_REGISTRY))}"
        )
    test_spec = TestSpec(
        instance_id=spec.instance_id,
        image="",
        eval_script_list=[],
        repo=spec.repo,
        version="",
        FAIL_TO_PASS=spec.fail_to_pass,
        PASS_TO_PASS=spec.pass_to_pass,
        log_parser=spec.log_parser,
        eval_type=spec.eval_type,
    )
    backend = f"swebench {swebench_version()}"
    # get_logs_eval reads a file: hand it exactly what the sandbox printed.
    fd, path = tempfile.mkstemp(prefix="swerollout-eval-", suffix=".log")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(log)
        statuses, found = get_logs_eval(test_spec, path)
    finally:
        os.unlink(path)
    if not found:
        # swebench says only "not found"; our own pass over the log explains why.
        _, why = _builtin_status_map(log, lambda text: PARSER_REGISTRY[spec.log_parser](text, test_spec))
        problem = why or "swebench found no gradable test output"
        return LogGrade(
            backend=backend,
            parser=spec.log_parser,
            tests={},
            fail_to_pass=GroupOutcome(failure=list(spec.fail_to_pass)),
            pass_to_pass=GroupOutcome(failure=list(spec.pass_to_pass)),
            resolved=False,
            problem=problem,
        )
    statuses, disagreements = _with_exact_matches(log, dict(statuses), [*spec.fail_to_pass, *spec.pass_to_pass])
    report: dict[str, Any] = get_eval_tests_report(
        statuses,
        {"instance_id": spec.instance_id, FAIL_TO_PASS: spec.fail_to_pass, PASS_TO_PASS: spec.pass_to_pass},
        eval_type=EvalType(spec.eval_type),
    )
    f2p = GroupOutcome(success=report[FAIL_TO_PASS]["success"], failure=report[FAIL_TO_PASS]["failure"])
    p2p = GroupOutcome(success=report[PASS_TO_PASS]["success"], failure=report[PASS_TO_PASS]["failure"])
    return LogGrade(
        backend=backend,
        parser=spec.log_parser,
        tests=dict(statuses),
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        resolved=get_resolution_status(report) == ResolvedStatus.FULL.value,
        disagreements=disagreements,
    )


def _grade_builtin(log: str, spec: _GradeInput) -> LogGrade:
    parse = _BUILTIN_PARSERS.get(spec.log_parser)
    if parse is None:
        raise GradingError(
            f"log parser {spec.log_parser!r} needs swebench (install swerollout[eval]); "
            f"the builtin grader knows {', '.join(sorted(_BUILTIN_PARSERS))}"
        )
    statuses, problem = _builtin_status_map(log, parse)
    if problem:
        f2p = GroupOutcome(failure=list(spec.fail_to_pass))
        p2p = GroupOutcome(failure=list(spec.pass_to_pass))
        return LogGrade(
            backend="builtin",
            parser=spec.log_parser,
            tests={},
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            resolved=False,
            problem=problem,
        )
    statuses, disagreements = _with_exact_matches(log, statuses, [*spec.fail_to_pass, *spec.pass_to_pass])
    f2p, p2p = _builtin_report(statuses, spec.fail_to_pass, spec.pass_to_pass, spec.eval_type)
    return LogGrade(
        backend="builtin",
        parser=spec.log_parser,
        tests=statuses,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        resolved=_resolved(f2p, p2p),
        disagreements=disagreements,
    )


def grade_log(
    log: str,
    *,
    instance_id: str,
    repo: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    log_parser: str = "parse_log_pytest",
    eval_type: str = "pass_and_fail",
    backend: Backend = "auto",
) -> LogGrade:
    """Grade the eval script's output. ``auto`` uses swebench when importable, else builtin.

    `log_parser` accepts SWE-bench's names (``parse_log_pytest``) or the API's short
    ones (``pytest``).
    """
    name = log_parser if log_parser.startswith("parse_log_") else f"parse_log_{log_parser}"
    spec = _GradeInput(instance_id, repo, name, eval_type, list(fail_to_pass), list(pass_to_pass))
    if backend == "builtin" or (backend == "auto" and swebench_harness_problem() is not None):
        return _grade_builtin(log, spec)
    problem = swebench_harness_problem()
    if problem is not None:
        raise GradingError(f"backend 'swebench' requested but {problem}")
    return _grade_with_swebench(log, spec)
