"""Task instances in SWE-bench's row format, and their translation to a SWERollout spec.

The client, the CLI and the dev tooling read instance rows through this module; it is
part of the library a trainer installs, so it imports nothing dev-only.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from swerollout import testids
from swerollout.api.v1alpha1 import EvalType, Evaluation, Instance, LogParser

__all__ = [
    "SWEBENCH_PARSER_PREFIX",
    "InstanceError",
    "SWEBenchInstance",
    "load_instances",
    "to_api_instance",
    "write_instances",
]

SWEBENCH_PARSER_PREFIX = "parse_log_"


class InstanceError(ValueError):
    """An instance row or file is not usable. Retrying does not help: fix the data."""


def _json_list(value: Any) -> Any:
    # SWE-bench's published datasets store the test lists as JSON-encoded strings.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a list or a JSON list string, got {value[:80]!r}") from exc
    return value


TestList = Annotated[list[str], BeforeValidator(_json_list)]


class SWEBenchInstance(BaseModel):
    """One line of instances.jsonl, in SWE-bench's instance format (its field names)."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    repo: str
    version: str
    base_commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    problem_statement: str
    hints_text: str = ""
    created_at: str
    patch: str
    """The gold patch (source changes only)."""
    test_patch: str
    FAIL_TO_PASS: TestList
    PASS_TO_PASS: TestList
    eval_script: str
    image: str
    """``file:<name>`` in the committed index; ``file://<absolute repo path>`` once materialized."""
    log_parser: str = f"{SWEBENCH_PARSER_PREFIX}pytest"
    eval_type: EvalType = EvalType.PASS_AND_FAIL


def write_instances(instances: Iterable[SWEBenchInstance], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(i.model_dump(mode="json"), sort_keys=True) + "\n" for i in instances]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(path)


def load_instances(path: Path) -> list[SWEBenchInstance]:
    """Read a SWE-bench style JSONL file (ours, or any with the same fields)."""
    if not path.is_file():
        raise InstanceError(f"instances file {path} does not exist; run `swerollout tasks materialize --dest DIR`")
    instances = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            instance = SWEBenchInstance.model_validate_json(line)
        except ValidationError as exc:
            raise InstanceError(f"{path}:{number}: not a valid instance: {exc}") from exc
        bad = testids.unmatchable([*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS])
        if bad:
            warnings.warn(f"{path}:{number}: {testids.describe(instance.instance_id, bad)}",
                          testids.UnmatchableTestIdWarning, stacklevel=2)
        instances.append(instance)
    return instances


def to_api_instance(instance: SWEBenchInstance, *, workdir: str = "/testbed") -> Instance:
    """The SWERollout ``spec.instance`` for a SWE-bench instance."""
    parser_name = instance.log_parser.removeprefix(SWEBENCH_PARSER_PREFIX)
    try:
        log_parser = LogParser(parser_name)
    except ValueError as exc:
        known = ", ".join(SWEBENCH_PARSER_PREFIX + p.value for p in LogParser)
        raise InstanceError(f"{instance.instance_id}: log_parser {instance.log_parser!r} is not supported; use one of {known}") from exc
    return Instance(
        instance_id=instance.instance_id,
        repo=instance.repo,
        base_commit=instance.base_commit,
        image=instance.image,
        problem_statement=instance.problem_statement,
        workdir=workdir,
        evaluation=Evaluation(
            fail_to_pass=instance.FAIL_TO_PASS,
            pass_to_pass=instance.PASS_TO_PASS,
            test_patch=instance.test_patch,
            eval_script=instance.eval_script,
            log_parser=log_parser,
            eval_type=instance.eval_type,
        ),
    )


