"""Where the viewer's rollouts come from: a file `swerollout results` wrote, or a batch
read through the client (API server + results endpoint or store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from swerollout.client.records import JSON_FIELDS
from swerollout.extras import require
from swerollout.viewer.model import ViewRecord

if TYPE_CHECKING:
    from swerollout.client import RolloutClient

SUFFIXES = (".jsonl", ".parquet")


class SourceError(Exception):
    """The rollouts cannot be read; the message names the file/line/field and the fix."""


def _record(row: dict[str, Any], where: str) -> ViewRecord:
    try:
        return ViewRecord.model_validate(row)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "row"
        raise SourceError(
            f"{where}: field {field!r}: {first['msg']} (write the file with `swerollout results --out`)"
        ) from exc


def load_file(path: Path) -> list[ViewRecord]:
    """Rollouts from a .jsonl or .parquet results file."""
    if path.suffix not in SUFFIXES:
        raise SourceError(
            f"--from {path}: the file must end in {' or '.join(SUFFIXES)} (as `swerollout results` writes)"
        )
    if not path.is_file():
        raise SourceError(
            f"--from {path}: no such file (write one with `swerollout results --batch NAME --out {path}`)"
        )
    return _load_parquet(path) if path.suffix == ".parquet" else _load_jsonl(path)


def _load_jsonl(path: Path) -> list[ViewRecord]:
    records = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{path}:{number}: not JSON ({exc.msg}); each line must be one rollout") from exc
            if not isinstance(row, dict):
                raise SourceError(f"{path}:{number}: a line must be a JSON object (one rollout)")
            records.append(_record(row, f"{path}:{number}"))
    return records


def _load_parquet(path: Path) -> list[ViewRecord]:
    pq = require("pyarrow.parquet", "parquet", "swerollout view --from FILE.parquet")

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise SourceError(f"{path}: not a readable Parquet file ({exc})") from exc
    records = []
    for number, row in enumerate(rows, 1):
        for column in JSON_FIELDS:
            if isinstance(row.get(column), str):
                row[column] = json.loads(row[column])
        records.append(_record(row, f"{path} row {number}"))
    return records


def load_batch(client: RolloutClient, batch: str) -> list[ViewRecord]:
    """A batch from the cluster, eval reports included."""
    rows = [r.to_dict() for r in client.results(batch, reports=True)]
    if not rows:
        raise SourceError(f"--batch {batch}: no rollouts in namespace {client.namespace} (check --namespace)")
    return [_record(row, f"rollout {row.get('name')}") for row in rows]
