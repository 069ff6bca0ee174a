"""Pure parts of the client: trainer statuses, status parsing, names."""

from __future__ import annotations

from typing import Any

import pytest

from swerollout.api.v1alpha1 import Phase
from swerollout.client import ClientError, TrainerStatus, check_batch_name, rollout_name, trainer_status
from swerollout.client.records import build_record, parse_status


@pytest.mark.parametrize(
    ("phase", "exit_status", "expected", "graded"),
    [
        # validate mode grades an autosubmission after exit_api: its reward is real
        (Phase.SUCCEEDED, "submitted (exit_api)", TrainerStatus.COMPLETED, True),
        (Phase.FAILED, "exit_api", TrainerStatus.FAILED, False),
    ]
    + [
        (*row, False)
        for row in [
            (Phase.SUCCEEDED, "submitted", TrainerStatus.COMPLETED),
            (Phase.SUCCEEDED, "exit_format", TrainerStatus.COMPLETED),
            (Phase.SUCCEEDED, "submitted (exit_max_iter_out)", TrainerStatus.COMPLETED),
            (Phase.SUCCEEDED, "exit_context", TrainerStatus.TRUNCATED),
            (Phase.SUCCEEDED, "submitted (exit_context)", TrainerStatus.TRUNCATED),
            (Phase.SUCCEEDED, "submitted (exit_api)", TrainerStatus.FAILED),
            (Phase.SUCCEEDED, "exit_environment_error", TrainerStatus.FAILED),
            (Phase.SUCCEEDED, "exit_api", TrainerStatus.FAILED),
            (Phase.SUCCEEDED, None, TrainerStatus.FAILED),
            (Phase.FAILED, "submitted", TrainerStatus.FAILED),
            (Phase.ABORTED, None, TrainerStatus.ABORTED),
            (Phase.RUNNING, None, TrainerStatus.ABORTED),
        ]
    ],
)
def test_trainer_status(phase: Phase, exit_status: str | None, expected: TrainerStatus, graded: bool) -> None:
    assert trainer_status(phase, exit_status, graded) is expected


def test_unknown_status_fields_from_a_newer_operator_are_dropped() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "b-0-0"},
        "status": {
            "phase": "Running",
            "futureField": {"x": 1},
            "progress": {"turns": 2, "generatedTokens": 7, "newCounter": 3},
        },
    }
    status = parse_status(obj)
    assert status.phase is Phase.RUNNING and status.progress is not None and status.progress.generated_tokens == 7
    assert "futureField" in obj["status"]  # the caller's object is not modified
    record = build_record(obj, None)
    assert record.status is TrainerStatus.ABORTED and record.response_ids.size == 0


def test_a_malformed_status_is_a_client_error_naming_the_rollout() -> None:
    with pytest.raises(ClientError, match="b-0-1"):
        parse_status({"metadata": {"name": "b-0-1"}, "status": {"phase": "Exploded"}})


def test_names_are_deterministic_and_bounded() -> None:
    assert rollout_name("step-42", 3, 7) == "step-42-3-7"
    assert check_batch_name("a" * 40) == "a" * 40
    assert len(rollout_name("a" * 40, 99_999, 9_999)) <= 63
    with pytest.raises(ValueError, match="shorter batch name"):
        rollout_name("a" * 40, 10**12, 10**10)
    with pytest.raises(ValueError, match="lowercase"):
        check_batch_name("Step_42")


def test_the_results_file_and_the_viewer_read_one_row_model() -> None:
    """RecordRow is the one spelling of a result row: a record's to_dict is its columns in
    order, `swerollout results` writes them as its Parquet schema, the viewer reads them back."""
    from swerollout.cli.results import parquet_schema
    from swerollout.client.records import JSON_FIELDS, RecordRow, column_types
    from swerollout.viewer.model import ViewRecord

    obj = {
        "metadata": {"name": "r-0-1", "namespace": "ns", "labels": {"swerollout.io/batch": "r"}},
        "spec": {"inference": {"tokenizer": "qwen-2.5"}},
        "status": {"phase": "Succeeded", "result": {"exitStatus": "exit_context", "turns": 3, "promptTokens": 2,
                                                    "responseTokens": 4}},
    }  # fmt: skip
    row = build_record(obj, None).to_dict()
    assert list(row) == list(RecordRow.model_fields) == list(column_types())
    assert row["status"] == "truncated" and row["truncated"] is True and row["phase"] == "Succeeded"
    assert parquet_schema().names == list(column_types())
    assert set(JSON_FIELDS) == {"messages", "times", "timings", "info", "report", "trainer_labels", "partial"}
    assert issubclass(ViewRecord, RecordRow) and ViewRecord.model_validate(row).model_dump() == row
