"""The eval script of a published row, and the log parser that reads its output.

In the order tried:

1. the row's own ``eval_script`` (SWE-bench's datasets carry it since swebench 5, with
   ``log_parser`` and ``eval_type``; so do rows written by ``swerollout tasks``);
2. SWE-rebench: its ``install_config`` publishes the test command and log parser;
3. SWE-Gym and SWE-smith publish no script: their images come from SWE-bench's harness
   (the project in the conda env ``testbed``) and their tests are pytest ids, so the script
   runs SWE-bench's pytest command on the test files (of the test patch, else of the named tests);
4. a classic SWE-bench row (no ``eval_script``): swebench's own test-spec builder writes it
   from its repo/version specs. swebench 4 has that builder; swebench 5 reads the script
   from the row instead, so with it such a row is refused with the fix named.

Every script prints SWE-bench's start/end markers and the test exit code, which is what
the runner's grader reads. The eval pod applies the test patch before running the script.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from swerollout.datasets.conventions import DatasetKind

__all__ = ["HARNESS_PYTEST", "EvalPlan", "eval_plan_for", "harness_script", "test_files"]

PARSER_PREFIX = "parse_log_"
# SWE-bench's test command for pytest projects (its harness constants, TEST_PYTEST).
HARNESS_PYTEST = "pytest --no-header -rA --tb=no -p no:cacheprovider"

_DIFF_TARGET = re.compile(r"^diff --git a/.* b/(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class EvalPlan:
    eval_script: str
    log_parser: str
    """SWE-bench's parser name, ``parse_log_<name>``."""
    eval_type: str = "pass_and_fail"


class EvalScriptUnavailable(ValueError):
    """No eval script can be had for the row; the message says which package or data fixes it."""


def _parser_name(value: Any, default: str = "pytest") -> str:
    name = str(value or default)
    return name if name.startswith(PARSER_PREFIX) else PARSER_PREFIX + name


def test_files(test_patch: str, tests: list[str]) -> list[str]:
    """The files the tests live in: those the test patch touches, else those of the test ids."""
    files = _DIFF_TARGET.findall(test_patch or "")
    if not files:
        files = [t.split("::", 1)[0] for t in tests if "::" in t]
    return list(dict.fromkeys(files))


def harness_script(test_cmd: str, files: list[str], *, workdir: str) -> str:
    """A SWE-bench-harness-shaped script: the testbed env, the test command between the markers."""
    command = " ".join([test_cmd, *(shlex.quote(f) for f in files)])
    return "\n".join(
        [
            "#!/bin/bash",
            "set -o pipefail",
            "# Images built by SWE-bench's harness keep the project in the conda env `testbed`.",
            "for conda in /opt/miniconda3 /opt/conda; do",
            '  if [ -f "$conda/bin/activate" ]; then source "$conda/bin/activate" testbed; break; fi',
            "done",
            f"cd {shlex.quote(workdir)}",
            'echo ">>>>> Start Test Output"',
            command,
            "SWEBENCH_TEST_EXIT_CODE=$?",
            'echo ">>>>> End Test Output"',
            'echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"',
            "",
        ]
    )


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _tests(row: Mapping[str, Any]) -> list[str]:
    tests: list[str] = []
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = _json_value(row.get(key))
        if isinstance(value, list):
            tests.extend(str(t) for t in value)
    return tests


def _rebench_plan(row: Mapping[str, Any], workdir: str) -> EvalPlan:
    config = _json_value(row.get("install_config"))
    if not isinstance(config, Mapping):
        raise EvalScriptUnavailable(
            f"{row['instance_id']}: install_config is not a mapping; SWE-rebench rows carry one"
        )
    test_cmd = config.get("test_cmd")
    if isinstance(test_cmd, list):
        test_cmd = " && ".join(str(c) for c in test_cmd)
    if not test_cmd:
        raise EvalScriptUnavailable(f"{row['instance_id']}: install_config has no test_cmd")
    files = test_files(str(row.get("test_patch") or ""), _tests(row))
    return EvalPlan(harness_script(str(test_cmd), files, workdir=workdir), _parser_name(config.get("log_parser")))


def _swebench_builder() -> Callable[[dict[str, Any]], Any] | None:
    """swebench 4's make_test_spec (builds eval scripts from repo/version specs), if installed."""
    try:
        from swebench.harness.test_spec.test_spec import make_test_spec
    except ImportError:
        return None
    return make_test_spec  # type: ignore[no-any-return]


def _swebench_version() -> str | None:
    try:
        import swebench
    except ImportError:
        return None
    return str(getattr(swebench, "__version__", "unknown"))


def _classic_plan(row: Mapping[str, Any]) -> EvalPlan:
    instance_id = row["instance_id"]
    builder = _swebench_builder()
    if builder is None:
        version = _swebench_version()
        have = f"swebench {version} is installed and" if version else "swebench is not installed;"
        raise EvalScriptUnavailable(
            f"{instance_id}: the row has no eval_script and {have} cannot write one: install the eval extra with "
            "swebench 4's test-spec builder (pip install 'swerollout[eval]' 'swebench>=4,<5'), or use the "
            "dataset's current release, whose rows carry eval_script (SWE-bench/SWE-bench_Verified)"
        )
    try:
        spec = builder(
            {
                **row,
                "FAIL_TO_PASS": _json_value(row.get("FAIL_TO_PASS")) or [],
                "PASS_TO_PASS": _json_value(row.get("PASS_TO_PASS")) or [],
            }
        )
    except KeyError as exc:
        raise EvalScriptUnavailable(
            f"{instance_id}: swebench's test-spec builder has no spec for repo {row.get('repo')!r} version "
            f"{row.get('version')!r} ({exc}); pass rows that carry eval_script"
        ) from exc
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    parser = MAP_REPO_TO_PARSER.get(str(row.get("repo")))
    return EvalPlan(str(spec.eval_script), getattr(parser, "__name__", PARSER_PREFIX + "pytest"))


def eval_plan_for(kind: DatasetKind, row: Mapping[str, Any], *, workdir: str = "/testbed") -> EvalPlan:
    """How ``row`` is graded. Raises EvalScriptUnavailable naming the fix."""
    script = row.get("eval_script")
    if isinstance(script, str) and script.strip():
        return EvalPlan(script, _parser_name(row.get("log_parser")), str(row.get("eval_type") or "pass_and_fail"))
    if kind is DatasetKind.SWE_REBENCH:
        return _rebench_plan(row, workdir)
    if kind in (DatasetKind.SWE_GYM, DatasetKind.SWE_SMITH):
        files = test_files(str(row.get("test_patch") or ""), _tests(row))
        if not files:
            raise EvalScriptUnavailable(f"{row['instance_id']}: no test patch and no pytest ids to find the test files")
        return EvalPlan(harness_script(HARNESS_PYTEST, files, workdir=workdir), _parser_name(row.get("log_parser")))
    return _classic_plan(row)
