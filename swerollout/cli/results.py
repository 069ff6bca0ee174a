"""`swerollout results --batch NAME --out FILE`: the batch's trajectories and rewards as
Parquet (``.parquet``) or JSON lines (``.jsonl``), one row per rollout.

Columns: name, batch, sample, member, instance_id, phase, status (completed |
truncated | aborted | failed), exit_status, reward, resolved, graded, turns,
prompt_ids, response_ids, loss_mask, logprobs, weight_versions, submission,
tokenizer, attempts, and as JSON strings in Parquet: messages, times (lifecycle
timestamps), timings, info (the runner's extras, with the turn log), report (the
full eval report), trainer_labels and partial (where a suspended run stopped); then
truncated and routed_experts (rows aligned to prompt + response, or null).
`swerollout view --from FILE` reads either format. Exits 1 when some rollout failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from swerollout.cli.rollouts import (
    EXIT_BATCH_FAILURES,
    EXIT_OK,
    EXIT_USAGE,
    add_connection_args,
    run_client_command,
)
from swerollout.client import RolloutClient, RolloutRecord, TrainerStatus
from swerollout.client.records import JSON_FIELDS, column_types
from swerollout.extras import require

PARQUET_USE = "swerollout results --out FILE.parquet"


def parquet_schema() -> Any:
    """The Parquet columns, from the record's row model (RecordRow: each field's arrow type);
    pyarrow is the `parquet` extra, imported only to write one."""
    pa = require("pyarrow", "parquet", PARQUET_USE)
    scalars = {
        "string": pa.string,
        "json": pa.string,
        "int32": pa.int32,
        "int64": pa.int64,
        "uint8": pa.uint8,
        "float32": pa.float32,
        "float64": pa.float64,
        "bool": pa.bool_,
    }

    def arrow(spec: str) -> Any:
        return pa.list_(arrow(spec[5:-1])) if spec.startswith("list<") else scalars[spec]()

    return pa.schema([(name, arrow(spec)) for name, spec in column_types().items()])


def write_parquet(records: list[RolloutRecord], path: Path) -> None:
    schema = parquet_schema()
    pa, pq = require("pyarrow", "parquet", PARQUET_USE), require("pyarrow.parquet", "parquet", PARQUET_USE)
    rows = []
    for record in records:
        row = record.to_dict()
        for column in JSON_FIELDS:
            row[column] = json.dumps(row[column])
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def write_jsonl(records: list[RolloutRecord], path: Path) -> None:
    with path.open("w") as fh:
        for record in records:
            fh.write(json.dumps(record.to_dict()) + "\n")


WRITERS = {".parquet": write_parquet, ".jsonl": write_jsonl}


def _results(args: argparse.Namespace, client: RolloutClient) -> int:
    out = Path(args.out)
    writer = WRITERS[out.suffix]
    records = client.results(args.batch, reports=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    writer(records, tmp)
    tmp.replace(out)
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status.value] = counts.get(record.status.value, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"wrote {len(records)} rollouts of batch {args.batch} to {out} ({summary})")
    failed = counts.get(TrainerStatus.FAILED.value, 0)
    return EXIT_BATCH_FAILURES if failed else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    # The output is checked before connecting: a wrong suffix or a missing extra is said at
    # once, not after the batch was read.
    out = Path(args.out)
    if out.suffix not in WRITERS:
        print(f"error: --out {out}: the file must end in {' or '.join(WRITERS)}", file=sys.stderr)
        return EXIT_USAGE
    if WRITERS[out.suffix] is write_parquet:
        parquet_schema()
    return run_client_command(_results)(args)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", required=True, help="batch to export")
    parser.add_argument("--out", "-o", required=True, help="output file: .parquet or .jsonl")
    add_connection_args(parser, results=True)
    parser.set_defaults(func=_run)
