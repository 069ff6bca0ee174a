"""Published dataset rows -> instances: every file form, each dataset's image rule and eval
script, unknown fields ignored, --filter/--limit, and the errors that name the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swerollout.api.v1alpha1 import LogParser
from swerollout.datasets import DatasetKind, read_rows
from swerollout.instances import InstanceError, instance_from_row, load_instances, to_api_instance
from tests.support.published_rows import (
    VERIFIED_SCRIPT,
    swe_gym,
    swe_rebench,
    swe_smith,
    swebench_classic,
    swebench_multimodal,
    swebench_verified,
)


def test_verified_row_keeps_its_image_and_eval_script_and_ignores_unknown_fields() -> None:
    row = swebench_verified(some_future_field={"x": 1})
    instance = instance_from_row(row)
    assert instance.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert instance.eval_script == VERIFIED_SCRIPT
    assert instance.FAIL_TO_PASS == ["pkg/tests/test_core.py::test_nested[compound_model6-result6]"]
    api = to_api_instance(instance)
    assert api.evaluation.log_parser is LogParser.ASTROPY


def test_classic_row_without_eval_script_names_the_fix() -> None:
    # swebench 5 (the lock's) reads eval scripts from the rows and has no builder for classic rows.
    with pytest.raises(
        InstanceError, match=r"astropy__astropy-12907: the row has no eval_script.*swebench>=4,<5.*SWE-bench_Verified"
    ):
        instance_from_row(swebench_classic())


def test_images_follow_each_datasets_naming_rule() -> None:
    assert (
        instance_from_row(swe_gym(), dataset="swe-gym").image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5406:latest"
    )
    smith = swe_smith()
    assert instance_from_row(smith).image == "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"
    del smith["image_name"]
    assert instance_from_row(smith).image == "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536:latest"
    rebench = swe_rebench()
    assert instance_from_row(rebench).image == "swerebench/sweb.eval.x86_64.tox-dev_1776_tox-3810"
    del rebench["docker_image"]
    assert instance_from_row(rebench).image == "swerebench/sweb.eval.x86_64.tox-dev_1776_tox-3810:latest"
    verified = swebench_verified()
    del verified["image"]
    assert instance_from_row(verified).image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"


def test_image_template_overrides_row_and_rule() -> None:
    template = "mirror.local:5000/{id_1776}:v1"
    assert (
        instance_from_row(swebench_verified(), image_template=template).image
        == "mirror.local:5000/astropy_1776_astropy-12907:v1"
    )
    assert instance_from_row(swe_gym(), dataset="swe-gym", image_template="m/{id_s}").image == "m/getmoto_s_moto-5406"
    with pytest.raises(InstanceError, match=r"\['tag'\].*\{instance_id\}"):
        instance_from_row(swebench_verified(), image_template="m/{tag}")


def test_swe_gym_is_told_by_name_and_gets_the_harness_pytest_script(tmp_path: Path) -> None:
    path = tmp_path / "SWE-Gym-train.jsonl"
    path.write_text(json.dumps(swe_gym()) + "\n")
    [instance] = load_instances(path)
    assert instance.image.startswith("xingyaoww/")
    script = instance.eval_script
    assert 'source "$conda/bin/activate" testbed' in script and "cd /testbed" in script
    assert "pytest --no-header -rA --tb=no -p no:cacheprovider pkg/tests/test_core.py\n" in script
    assert script.index(">>>>> Start Test Output") < script.index("pytest") < script.index(">>>>> End Test Output")
    assert instance.log_parser == "parse_log_pytest"


def test_swe_smith_script_runs_the_files_of_the_named_tests() -> None:
    script = instance_from_row(swe_smith()).eval_script
    assert "-p no:cacheprovider tests/oauth2/rfc6749/test_server.py tests/test_common.py\n" in script


def test_swe_rebench_script_uses_its_published_test_command() -> None:
    instance = instance_from_row(swe_rebench())
    assert "-W ignore::DeprecationWarning pkg/tests/test_core.py\n" in instance.eval_script
    assert instance.log_parser == "parse_log_pytest"


def test_multimodal_image_assets_become_issue_images() -> None:
    api = to_api_instance(instance_from_row(swebench_multimodal()))
    assert api.issue_images == ["https://user-images.example/a.png", "https://user-images.example/b.png"]
    assert api.evaluation.log_parser is LogParser.CHART_JS
    assert api.image == "swebench/sweb.eval.x86_64.chartjs_1776_chart.js-10301:latest"


def test_too_many_issue_images_is_refused_not_dropped() -> None:
    row = swebench_multimodal()
    row["image_assets"] = json.dumps({"problem_statement": [f"https://i.example/{n}.png" for n in range(17)]})
    with pytest.raises(InstanceError, match="17 images.*at most 16"):
        instance_from_row(row)


def _rows() -> list[dict[str, Any]]:
    # One dataset has one set of columns: the union, null where a row has none (as the hub writes it).
    rows = [swebench_verified(), swebench_verified(instance_id="django__django-11099"), swebench_multimodal()]
    columns = {key for row in rows for key in row}
    return [{key: row.get(key) for key in sorted(columns)} for row in rows]


def test_every_file_form_reads_the_same_rows(tmp_path: Path) -> None:
    rows = _rows()
    jsonl = tmp_path / "v.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    array = tmp_path / "v.json"
    array.write_text(json.dumps(rows))
    parquet = tmp_path / "v.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    expected = [i.instance_id for i in load_instances(jsonl)]
    assert expected == ["astropy__astropy-12907", "django__django-11099", "chartjs__Chart.js-10301"]
    for source in (array, parquet):
        assert load_instances(source) == load_instances(jsonl)


def test_saved_datasets_folder_and_its_splits(tmp_path: Path) -> None:
    import datasets

    rows = _rows()
    # Columns as the hub types them: every row has every column.
    single = tmp_path / "single"
    datasets.Dataset.from_list(rows).save_to_disk(str(single))
    assert [i.instance_id for i in load_instances(single)][:2] == ["astropy__astropy-12907", "django__django-11099"]
    both = tmp_path / "dict"
    datasets.DatasetDict(
        {"dev": datasets.Dataset.from_list(rows[:1]), "test": datasets.Dataset.from_list(rows)}
    ).save_to_disk(str(both))
    assert len(load_instances(both)) == 3
    assert len(load_instances(both, split="dev")) == 1
    with pytest.raises(InstanceError, match="no split 'train'; it has dev, test"):
        load_instances(both, split="train")
    json_lines = tmp_path / "exported.json"
    datasets.Dataset.from_list(rows).to_json(str(json_lines))  # JSON lines under a .json name
    assert load_instances(json_lines) == load_instances(single)


def test_parquet_typed_columns_are_accepted(tmp_path: Path) -> None:
    import datetime

    row = swe_rebench()
    row["created_at"] = datetime.datetime(2025, 5, 2, 10, 0)
    path = tmp_path / "rebench.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    [instance] = load_instances(path)
    assert instance.created_at.startswith("2025-05-02") and instance.image.startswith("swerebench/")


def test_filter_and_limit_pick_instances(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    rows = [swebench_verified(instance_id=f"django__django-{n}") for n in range(30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(load_instances(path, limit=20)) == 20
    picked = load_instances(path, id_filter=r"django__django-1\d", limit=3)
    assert [i.instance_id for i in picked] == ["django__django-10", "django__django-11", "django__django-12"]
    with pytest.raises(InstanceError, match="no instances match --filter 'flask.*'"):
        load_instances(path, id_filter="flask.*")
    with pytest.raises(InstanceError, match="--filter '\\(' is not a regular expression"):
        load_instances(path, id_filter="(")


def test_bad_rows_and_files_name_the_place(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps(swebench_verified()) + "\n" + json.dumps({"instance_id": "x__y-1"}) + "\n")
    with pytest.raises(InstanceError, match=r"v\.jsonl:2: x__y-1"):
        load_instances(path)
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(InstanceError, match="unknown dataset format '.csv'"):
        load_instances(tmp_path / "rows.csv")
    with pytest.raises(InstanceError, match="missing.jsonl does not exist"):
        load_instances(tmp_path / "missing.jsonl")
    with pytest.raises(InstanceError, match="not a saved dataset"):
        load_instances(tmp_path)


def test_hub_name_goes_to_datasets_and_reports_its_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No network here: offline mode makes `datasets` fail at once, and the error says what was asked.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(Exception, match="cannot load SWE-bench/SWE-bench_Verified from the hub"):
        read_rows("SWE-bench/SWE-bench_Verified", split="test")


def test_cli_help_lists_the_dataset_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "swerollout.cli.main", "submit", "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    for option in ("--dataset", "--image-template", "--filter", "--limit", "--split"):
        assert option in out
    assert all(k.value in out for k in DatasetKind)
