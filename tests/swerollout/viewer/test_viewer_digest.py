"""What the pages draw, from real records: counts, markers, escaping of the embedded data,
and the file formats `swerollout results` writes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from swerollout.viewer.digest import batch_summary, groups, rollout_detail
from swerollout.viewer.page import embed_json, report_html
from swerollout.viewer.source import SourceError, load_file


def test_jsonl_and_parquet_read_back_the_same_records(demo_batch: Any) -> None:
    from_jsonl, from_parquet = load_file(demo_batch.jsonl), load_file(demo_batch.parquet)
    assert [r.model_dump() for r in from_jsonl] == [r.model_dump() for r in from_parquet]
    assert [r.name for r in from_jsonl] == [r.name for r in demo_batch.records]
    first = from_jsonl[0]
    assert first.tokenizer == "qwen-2.5" and first.report is not None and first.info["turn_log"]


def test_batch_summary_counts_match_the_records(demo_batch: Any) -> None:
    records = load_file(demo_batch.jsonl)
    summary = batch_summary(records, "demo")
    assert summary["total"] == len(demo_batch.records)
    assert summary["resolved"] == sum(1 for r in demo_batch.records if r.resolved)
    assert summary["exit_statuses"] == dict(Counter(r.exit_status for r in demo_batch.records))
    assert summary["aborted"] == 1 and summary["resumed"] == 1
    trained = Counter(v for r in demo_batch.records for m, v in zip(r.loss_mask, r.weight_versions) if m)
    assert summary["versions"] == dict(trained) and set(trained) == {"v1", "v2"}
    assert sum(summary["histograms"]["turns"]["counts"]) == len(records)
    # Lifecycle from the status timestamps: 2 s queued, 3 s starting, 25 s running, 11 s evaluating.
    assert summary["phases"]["queued"]["median"] == 2.0 and summary["phases"]["evaluating"]["max"] == 11.0


def test_rollout_detail_decodes_every_token_and_marks_abort_resume_and_versions(demo_batch: Any) -> None:
    records = {r.name: r for r in load_file(demo_batch.jsonl)}
    aborted = records[demo_batch.aborted]
    detail = rollout_detail(aborted, groups(records.values())[aborted.name])
    tokens = detail["token_view"]
    assert len(tokens["pieces"]) == len(aborted.prompt_ids) + len(aborted.response_ids) == len(tokens["mask"])
    assert "".join(tokens["pieces"]).startswith("<|im_start|>system")
    assert sum(tokens["mask"]) == sum(aborted.loss_mask)
    kinds = [m["kind"] for m in tokens["marks"]]
    assert kinds.count("abort") == 1 and kinds.count("resume") == 1 and kinds.count("version") == 1
    abort = next(m for m in tokens["marks"] if m["kind"] == "abort")
    version = next(m for m in tokens["marks"] if m["kind"] == "version")
    # The aborted request sat where the resumed (v2) turn starts: the first v2 token.
    assert abort["at"] == version["at"]
    assert tokens["version_table"][tokens["versions"][abort["at"]]] == "v2"
    assert tokens["version_table"][tokens["versions"][abort["at"] - 1]] is None  # environment token before it
    assert detail["group"] == [f"{aborted.batch}-{aborted.sample}-1"]


def test_invalid_utf8_and_markup_are_safe_in_the_embedded_json(demo_batch: Any) -> None:
    records = {r.name: r for r in load_file(demo_batch.jsonl)}
    detail = rollout_detail(records[demo_batch.hostile])
    text = embed_json(detail)
    text.encode("utf-8")  # lone surrogates would make this raise
    assert "<" not in text and ">" not in text and "\ufffd" in text
    html = report_html(batch_summary(records.values(), "x"), {demo_batch.hostile: detail})
    assert html.count("<script") == 2  # the data element and our script, nothing from the trajectory
    tool = next(m for m in json.loads(text)["messages"] if m["role"] == "tool")
    assert tool["content"].count("<script>") == 1 and "\ufffd" in tool["content"]


def test_bad_input_gets_one_line_naming_the_field(tmp_path: Path, demo_batch: Any) -> None:
    bad = tmp_path / "bad.jsonl"
    row = json.loads(demo_batch.jsonl.read_text().splitlines()[0])
    row["loss_mask"] = row["loss_mask"][:-1]
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(SourceError, match=r"bad.jsonl:1: field 'row'|loss_mask"):
        load_file(bad)
    with pytest.raises(SourceError, match=r"must end in .jsonl or .parquet"):
        load_file(tmp_path / "x.csv")
    run = subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", "view", "--from", str(tmp_path / "none.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "no such file" in run.stderr


def test_a_kept_abort_is_marked_inside_its_turn() -> None:
    """onAbort Keep: the abort mark sits after the kept tokens, inside the turn's run."""
    from swerollout.viewer.digest import turn_marks
    from swerollout.viewer.model import ViewRecord

    record = ViewRecord(
        name="keep",
        prompt_ids=[1, 2],
        response_ids=[10, 11, 12, 13, 3, 20],
        loss_mask=[1, 1, 1, 1, 0, 1],
        logprobs=[0.0] * 6,
        weight_versions=["v1", "v1", "v2", "v2", None, "v2"],
        info={
            "turn_log": [
                {"finish": "abort", "sampled": 3, "kept": True, "kept_tokens": 2, "weight_version": "v1"},
                {"finish": "stop", "sampled": 2, "kept": True, "kept_tokens": 2, "weight_version": "v2"},
                {"finish": "stop", "sampled": 1, "kept": True, "kept_tokens": 1, "weight_version": "v2"},
            ]
        },
    )
    marks, aborts, resumes = turn_marks(record)
    assert (aborts, resumes) == (1, 1)
    assert [(m["kind"], m["at"]) for m in marks] == [("abort", 4), ("resume", 4)]
    assert "2 sampled tokens kept, 1 dropped" in marks[0]["label"]
