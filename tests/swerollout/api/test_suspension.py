"""The suspend rule (is_suspended and its helpers in swerollout.api.v1alpha1) and the SWERolloutBatch model and CRD."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swerollout.api import crdgen
from swerollout.api import v1alpha1 as api
from swerollout.api.v1alpha1 import batch_name, is_suspended, suspended_by, weight_version


def batch(**spec: object) -> api.SWERolloutBatchSpec:
    return api.SWERolloutBatchSpec.model_validate(spec)


@pytest.mark.parametrize(
    ("own", "batch_spec", "suspended"),
    [
        (False, None, False),  # no batch object: the rollout's own flag alone, as before
        (True, None, True),
        (False, {"suspend": False}, False),
        (False, {"suspend": True}, True),  # the batch suspends a member that did not ask
        (True, {"suspend": False}, True),  # resuming the batch does not resume a member suspended by name
        (True, {"suspend": True}, True),
    ],
)
def test_a_rollout_is_suspended_while_its_own_flag_or_its_batchs_is_true(
    own: bool, batch_spec: dict[str, object] | None, suspended: bool
) -> None:
    spec = batch(**batch_spec) if batch_spec is not None else None
    assert is_suspended(own, spec) is suspended
    assert bool(suspended_by(own, spec)) is suspended


def test_who_suspends_is_named() -> None:
    assert suspended_by(True, None) == "spec.suspend"
    assert suspended_by(False, batch(suspend=True), "b1") == "batch b1"
    assert suspended_by(True, batch(suspend=True), "b1") == "spec.suspend and batch b1"
    assert suspended_by(True, batch(suspend=False), "b1") == "spec.suspend"
    assert "SWERolloutBatch" in suspended_by(False, batch(suspend=True))


def test_the_batchs_weight_version_wins_when_set() -> None:
    assert weight_version("v1", None) == "v1"
    assert weight_version("v1", batch(suspend=False)) == "v1"
    assert weight_version("v1", batch(weightVersion="v2")) == "v2"
    assert weight_version(None, batch(weightVersion="v2")) == "v2"


def test_the_batch_is_named_by_the_label_the_client_sets() -> None:
    assert batch_name({api.LABEL_BATCH: "step-7"}) == "step-7"
    assert batch_name({}) is None and batch_name(None) is None and batch_name({api.LABEL_BATCH: ""}) is None


def test_batch_spec_is_strict_and_bounded() -> None:
    assert batch().suspend is False and batch().weight_version is None
    with pytest.raises(ValidationError, match="suspend"):
        batch(suspend="yes")
    with pytest.raises(ValidationError, match="weightVersion|weight_version"):
        batch(weightVersion="x" * 129)
    with pytest.raises(ValidationError):
        batch(suspended=True)  # a misspelt field is refused, not ignored
    whole = api.SWERolloutBatch.model_validate({"metadata": {"name": "step-7"}, "spec": {"suspend": True}})
    assert whole.to_wire() == {
        "apiVersion": api.API_VERSION,
        "kind": api.BATCH_KIND,
        "metadata": {"name": "step-7", "labels": {}, "annotations": {}},
        "spec": {"suspend": True},
    }


def test_batch_crd_is_generated_from_the_model() -> None:
    crd = crdgen.batch_crd()
    assert crd["metadata"]["name"] == f"{api.BATCH_PLURAL}.{api.GROUP}"
    version = crd["spec"]["versions"][0]
    assert "subresources" not in version, "the operator writes nothing to a batch, so it has no status"
    schema = version["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert spec["properties"]["suspend"] == {**spec["properties"]["suspend"], "type": "boolean", "default": False}
    assert spec["properties"]["weightVersion"]["maxLength"] == 128
    assert spec.get("additionalProperties") is None and "x-kubernetes-preserve-unknown-fields" not in spec
    assert schema["x-kubernetes-validations"] == [api.BATCH_NAME_RULE]
