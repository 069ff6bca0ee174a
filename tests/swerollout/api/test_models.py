"""The API models and the CRD generated from them (no cluster needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from swerollout.api import crdgen
from swerollout.api import v1alpha1 as api

ROOT = Path(__file__).resolve().parents[3]


def test_checked_in_crds_match_a_fresh_generation() -> None:
    fresh = crdgen.renders()
    paths = crdgen.targets(ROOT / "crds", ROOT / "helm" / "swerollout")
    assert {p.name for p in paths} == {crdgen.CRD_FILENAME, crdgen.BATCH_CRD_FILENAME}
    for path in paths:
        assert path.read_text() == fresh[path.name], f"{path} is stale: run `make crds`"


def test_check_mode_fails_on_drift(tmp_path: Path) -> None:
    (tmp_path / crdgen.CRD_FILENAME).write_text("stale\n")
    rc = crdgen.main(["--check", "--out", str(tmp_path), "--chart", str(tmp_path / "chart")])
    assert rc == 1


def _schema() -> dict:
    return crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_is_structural() -> None:
    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for banned in ("$ref", "allOf", "oneOf", "title", "const"):
                assert banned not in node, f"{banned} at {path}"
            if "anyOf" in node:  # only the one form the API server allows: int-or-string
                assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
                assert node.get("x-kubernetes-int-or-string") is True, path
            if "properties" in node:
                assert node.get("type") == "object", path
                assert node.get("additionalProperties") is not False, path
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(_schema(), "")


def test_descriptions_defaults_bounds_and_rules_come_from_the_models() -> None:
    spec = _schema()["properties"]["spec"]
    agent = spec["properties"]["agent"]
    assert agent["properties"]["maxTurns"]["default"] == 50
    assert agent["properties"]["maxTurns"]["minimum"] == 1
    assert "exit_max_iter_out" in agent["properties"]["maxTurns"]["description"]
    assert agent["properties"]["kind"]["enum"] == ["RLTokenAgent", "TextBashAgent", "ChatAgent"]
    # A whole missing sub-object is defaulted, so its nested defaults apply.
    assert agent["default"]["maxTurns"] == 50
    instance = spec["properties"]["instance"]
    assert instance["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert set(spec["required"]) == {"instance", "inference"}
    conditions = _schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {"type", "status", "lastTransitionTime", "reason"}


def test_every_string_and_list_is_bounded() -> None:
    """Unbounded strings make the API server's CEL cost estimate fail and let objects grow unbounded."""

    def walk(node: dict, path: str) -> None:
        kind = node.get("type")
        if kind == "string" and "enum" not in node and path.startswith(".spec"):
            assert "maxLength" in node or "pattern" in node, path
        if kind == "array":
            assert "maxItems" in node, path
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(_schema(), "")


def test_models_reject_what_the_server_rejects() -> None:
    with pytest.raises(ValidationError) as err:
        api.Agent.model_validate({"maxTurns": 0})
    assert "maxTurns" in str(err.value) or "max_turns" in str(err.value)
    with pytest.raises(ValidationError):
        api.Agent.model_validate({"maxTurn": 3})  # typo: extra fields are forbidden


def test_wire_form_is_camel_case_and_round_trips() -> None:
    spec = api.SWERolloutSpec.model_validate(
        {
            "instance": {
                "instanceId": "a__b-1",
                "repo": "a/b",
                "baseCommit": "abcdef0",
                "image": "img",
                "problemStatement": "p",
                "evaluation": {"failToPass": ["t.py::t"]},
            },
            "inference": {"endpoint": "http://x:1", "tokenizer": "qwen-2.5"},
        }
    )
    wire = spec.to_wire()
    assert wire["instance"]["instanceId"] == "a__b-1"
    assert wire["sandbox"]["keepAliveSecondsAfterAbort"] == 1800
    assert api.SWERolloutSpec.model_validate(wire) == spec


def test_make_crds_command_is_reproducible(tmp_path: Path) -> None:
    out = tmp_path / "crds"
    subprocess.run(
        [sys.executable, "-m", "swerollout.api.crdgen", "--out", str(out), "--chart", str(tmp_path / "chart")],
        check=True,
        capture_output=True,
    )
    assert (out / crdgen.CRD_FILENAME).read_text() == (ROOT / "crds" / crdgen.CRD_FILENAME).read_text()


def test_configuration_reference_is_generated_from_the_models() -> None:
    from swerollout.api import docgen

    reference = (ROOT / "docs" / "api-reference.md").read_text()
    assert reference == docgen.render(), "docs/api-reference.md is stale: run `make crds`"
    assert "`spec.sandbox.keepAliveSecondsAfterAbort`" in reference
    assert "spec.instance is immutable" in reference
