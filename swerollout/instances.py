"""Task instances in SWE-bench's row format, and their translation to a SWERollout spec.

Rows come as the datasets publish them (SWE-bench full/Lite/Verified/Multimodal, SWE-Gym,
SWE-smith, SWE-rebench; see :mod:`swerollout.datasets`) or as ``swerollout tasks`` writes
them. :func:`instance_from_row` resolves what a published row leaves out (the image, the eval
script, the issue images) into one :class:`SWEBenchInstance`; :func:`to_api_instance` turns
that into ``spec.instance``. Unknown fields are ignored.

The client, the CLI and the dev tooling read instance rows through this module; it is
part of the library a trainer installs, so it imports nothing dev-only.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from swerollout import testids
from swerollout.api.base import one_line
from swerollout.api.v1alpha1 import EvalType, Evaluation, Instance, LogParser
from swerollout.datasets import (
    DatasetFileError,
    DatasetKind,
    EvalScriptUnavailable,
    detect_kind,
    eval_plan_for,
    image_for,
    read_rows,
)

__all__ = [
    "MAX_ISSUE_IMAGES",
    "SWEBENCH_PARSER_PREFIX",
    "InstanceError",
    "SWEBenchInstance",
    "instance_from_row",
    "load_instances",
    "select_rows",
    "to_api_instance",
    "write_instances",
]

SWEBENCH_PARSER_PREFIX = "parse_log_"
MAX_ISSUE_IMAGES = 16


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


def _text(value: Any) -> Any:
    # Parquet hands timestamps and numbers over typed (created_at, version "0.12" as float).
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    isoformat = getattr(value, "isoformat", None)
    return isoformat() if callable(isoformat) else str(value)


TestList = Annotated[list[str], BeforeValidator(_json_list)]
Text = Annotated[str, BeforeValidator(_text)]


class SWEBenchInstance(BaseModel):
    """One resolved instance row, in SWE-bench's field names (what instances.jsonl holds)."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str
    repo: str
    version: Text = ""
    base_commit: str = Field(pattern=r"^[0-9a-f]{7,64}$")
    problem_statement: str
    hints_text: Text = ""
    created_at: Text = ""
    patch: Text = ""
    """The gold patch (source changes only)."""
    test_patch: Text = ""
    FAIL_TO_PASS: TestList
    PASS_TO_PASS: TestList = Field(default_factory=list)
    eval_script: str
    image: str
    """A container image; ``file:<name>`` in the committed index; ``file://<absolute repo path>`` once materialized."""
    log_parser: str = f"{SWEBENCH_PARSER_PREFIX}pytest"
    eval_type: EvalType = EvalType.PASS_AND_FAIL
    issue_images: list[str] = Field(default_factory=list)
    """URLs of the images of the issue (SWE-bench Multimodal's image_assets.problem_statement)."""


def _issue_images(row: Mapping[str, Any]) -> list[str]:
    if isinstance(row.get("issue_images"), list):
        return [str(u) for u in row["issue_images"]]
    assets = row.get("image_assets")
    if isinstance(assets, str):
        assets = json.loads(assets) if assets.strip() else {}
    if not assets:
        return []
    if not isinstance(assets, Mapping):
        raise InstanceError(f"{row.get('instance_id')}: image_assets is not a mapping")
    images = assets.get("problem_statement") or []
    return [str(u) for u in images]


def instance_from_row(
    row: Mapping[str, Any],
    *,
    dataset: DatasetKind | str | None = None,
    image_template: str | None = None,
    source_name: str = "",
    workdir: str = "/testbed",
) -> SWEBenchInstance:
    """Resolve a published row: image (template > row > the dataset's rule), eval script, issue images."""
    instance_id = row.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        raise InstanceError("the row has no instance_id (a string); is this a SWE-bench style dataset?")
    kind = DatasetKind(dataset) if dataset else detect_kind(row, source_name)
    try:
        image = image_for(kind, row, image_template)
        plan = eval_plan_for(kind, row, workdir=workdir)
        issue_images = _issue_images(row)
    except EvalScriptUnavailable as exc:
        raise InstanceError(str(exc)) from exc
    except (ValueError, json.JSONDecodeError) as exc:
        raise InstanceError(f"{instance_id}: {exc}") from exc
    if len(issue_images) > MAX_ISSUE_IMAGES:
        raise InstanceError(
            f"{instance_id}: the issue has {len(issue_images)} images; spec.instance.issueImages takes at most "
            f"{MAX_ISSUE_IMAGES}: drop this instance (--filter) or trim image_assets.problem_statement"
        )
    resolved = {
        **row,
        "image": image,
        "eval_script": plan.eval_script,
        "log_parser": plan.log_parser,
        "eval_type": plan.eval_type,
        "issue_images": issue_images,
    }
    try:
        return SWEBenchInstance.model_validate(resolved)
    except ValidationError as exc:
        raise InstanceError(
            f"{instance_id}: not a valid instance: {one_line(exc, '')} (fix this field of the row)"
        ) from exc


def select_rows(
    rows: list[dict[str, Any]], *, id_filter: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Rows whose instance_id fully matches the regular expression ``id_filter``, the first ``limit`` of them."""
    if id_filter:
        try:
            pattern = re.compile(id_filter)
        except re.error as exc:
            raise InstanceError(f"--filter {id_filter!r} is not a regular expression: {exc}") from exc
        rows = [r for r in rows if pattern.fullmatch(str(r.get("instance_id", "")))]
    if limit is not None:
        if limit < 1:
            raise InstanceError(f"--limit must be at least 1, got {limit}")
        rows = rows[:limit]
    return rows


def load_instances(
    source: str | Path,
    *,
    dataset: DatasetKind | str | None = None,
    split: str | None = None,
    image_template: str | None = None,
    id_filter: str | None = None,
    limit: int | None = None,
) -> list[SWEBenchInstance]:
    """Read instances from a .jsonl/.json/.parquet file, a saved ``datasets`` folder or a hub name.

    ``dataset`` says whose conventions apply (detected from the rows and the name when
    omitted); ``id_filter`` (a regular expression over instance ids) and ``limit`` pick rows.
    """
    try:
        rows = read_rows(source, split=split)
    except DatasetFileError as exc:
        raise InstanceError(str(exc)) from exc
    numbered = select_rows([{**r, "__row__": n} for n, r in enumerate(rows, start=1)], id_filter=id_filter, limit=limit)
    if not numbered:
        raise InstanceError(f"{source}: no instances" + (f" match --filter {id_filter!r}" if id_filter else ""))
    instances = []
    for row in numbered:
        number = row.pop("__row__")
        try:
            instance = instance_from_row(row, dataset=dataset, image_template=image_template, source_name=str(source))
        except InstanceError as exc:
            raise InstanceError(f"{source}:{number}: {exc}") from exc
        bad = testids.unmatchable([*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS])
        if bad:
            warnings.warn(
                f"{source}:{number}: {testids.describe(instance.instance_id, bad)}",
                testids.UnmatchableTestIdWarning,
                stacklevel=2,
            )
        instances.append(instance)
    return instances


def write_instances(instances: Iterable[SWEBenchInstance], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Rows without issue images keep the format they had before the field existed.
    dumped = [i.model_dump(mode="json", exclude={"issue_images"} if not i.issue_images else None) for i in instances]
    lines = [json.dumps(d, sort_keys=True) + "\n" for d in dumped]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(path)


def to_api_instance(instance: SWEBenchInstance, *, workdir: str = "/testbed") -> Instance:
    """The SWERollout ``spec.instance`` for a SWE-bench instance."""
    parser_name = instance.log_parser.removeprefix(SWEBENCH_PARSER_PREFIX)
    try:
        log_parser = LogParser(parser_name)
    except ValueError as exc:
        known = ", ".join(SWEBENCH_PARSER_PREFIX + p.value for p in LogParser)
        raise InstanceError(
            f"{instance.instance_id}: log_parser {instance.log_parser!r} is not supported; use one of {known}"
        ) from exc
    return Instance(
        instance_id=instance.instance_id,
        repo=instance.repo,
        base_commit=instance.base_commit,
        image=instance.image,
        problem_statement=instance.problem_statement,
        issue_images=instance.issue_images,
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
