"""Loading instance rows: ids no test log can show are warned about, by name."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from swerollout import instances, testids


def _row(f2p: list[str], p2p: list[str]) -> dict[str, object]:
    return {
        "instance_id": "demo__calc-1",
        "repo": "demo/calc",
        "version": "1.0",
        "base_commit": "0" * 40,
        "problem_statement": "add() is wrong",
        "created_at": "2026-01-01",
        "patch": "",
        "test_patch": "",
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": p2p,
        "eval_script": "pytest -rA",
        "image": "file:calc",
    }


def test_unmatchable_ids_are_warned_about_by_name(tmp_path: Path) -> None:
    path = tmp_path / "instances.jsonl"
    bad = "tests/t.py::test_y[line\nbreak]"
    path.write_text(json.dumps(_row([bad, "tests/t.py::test_y[two words]"], [" tests/t.py::test_z"])) + "\n")
    with pytest.warns(testids.UnmatchableTestIdWarning) as caught:
        loaded = instances.load_instances(path)
    assert len(loaded) == 1  # still loaded: the warning is for the person who owns the data
    message = str(caught[0].message)
    assert repr(bad) in message and repr(" tests/t.py::test_z") in message
    assert "two words" not in message  # spaces inside brackets are matched exactly
    assert f"{path}:1" in message and "demo__calc-1" in message


def test_ordinary_ids_load_without_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(_row(["tests/t.py::test_y[two words]", "tests/t.py::test_y[a - b]"], ["[100%]"])) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        instances.load_instances(path)
