"""Generate the CRDs (SWERollout, SWERolloutBatch) from the pydantic API models.

The API server wants a *structural* OpenAPI v3 schema, which differs from the
JSON Schema pydantic emits: no $ref, no anyOf-with-null for optional fields, no
`additionalProperties: false` beside `properties`, boolean `exclusiveMinimum`.
This module does that translation and nothing else, so the models stay the one
source of truth.

    python -m swerollout.api.crdgen --out crds/ --chart helm/swerollout
    python -m swerollout.api.crdgen --check      # exit 1 when the files are stale
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticUndefined, core_schema

from . import v1alpha1 as api

CRD_FILENAME = "swerollout.io_swerollouts.yaml"
BATCH_CRD_FILENAME = "swerollout.io_swerolloutbatches.yaml"
# The explicit document start keeps files joined without separators apart: `helm show
# crds` prints the chart's crds/ files back to back, and kubectl would read them as one.
HEADER = "---\n# Generated from swerollout/api/v1alpha1.py by `make crds`. Do not edit.\n"


class _WithFactoryDefaults(GenerateJsonSchema):
    """Also emit defaults that come from a default_factory.

    Without them the API server would not default a whole missing sub-object
    (e.g. `spec.agent`), and its nested defaults would never apply.
    """

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            inner = self.generate_inner(schema["schema"])
            value = factory()  # type: ignore[call-arg]
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            return {**inner, "default": self.encode_default(value)}
        return super().default_schema(schema)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_WithFactoryDefaults)
    defs = raw.pop("$defs", {})
    structural: dict[str, Any] = _structural(raw, defs)
    return structural


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").rsplit("/", 1)[-1]])
        # Siblings of $ref (a field's own description/default) override the target's.
        node = {**target, **node}
        return _structural(node, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        return _structural({**inner, **node}, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            del node["anyOf"]
            if node.get("default", PydanticUndefined) is None:
                del node["default"]
            return _structural({**options[0], **node}, defs)
    node.pop("title", None)
    if "const" in node:
        node["enum"] = [node.pop("const")]
        node.setdefault("type", "string")
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            node["minimum" if key == "exclusiveMinimum" else "maximum"] = node[key]
            node[key] = True
    if node.get("format") == "date-time":
        node["type"] = "string"
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def crd() -> dict[str, Any]:
    spec_schema = model_schema(api.SWERolloutSpec)
    status_schema = model_schema(api.SWERolloutStatus)
    root = {
        "type": "object",
        "description": (api.SWERollout.__doc__ or "").strip(),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object: swerollout.io/v1alpha1."},
            "kind": {"type": "string", "description": "Kind of this object: SWERollout."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    columns: list[dict[str, Any]] = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Turns", "type": "integer", "jsonPath": ".status.progress.turns"},
        {"name": "Tokens", "type": "integer", "jsonPath": ".status.progress.tokens"},
        {"name": "Reward", "type": "number", "jsonPath": ".status.reward.value"},
        {"name": "Exit", "type": "string", "jsonPath": ".status.result.exitStatus", "priority": 1},
        {"name": "Pod", "type": "string", "jsonPath": ".status.sandbox.podName", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(api.KIND, api.PLURAL, api.SINGULAR, api.SHORT_NAMES, root, columns, status=True)


def batch_crd() -> dict[str, Any]:
    root = {
        "type": "object",
        "description": (api.SWERolloutBatch.__doc__ or "").strip(),
        "x-kubernetes-validations": [api.BATCH_NAME_RULE],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object: swerollout.io/v1alpha1."},
            "kind": {"type": "string", "description": "Kind of this object: SWERolloutBatch."},
            "metadata": {"type": "object"},
            "spec": {**model_schema(api.SWERolloutBatchSpec), "default": {}},
        },
    }
    columns: list[dict[str, Any]] = [
        {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
        {"name": "WeightVersion", "type": "string", "jsonPath": ".spec.weightVersion"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    # No status: the operator only reads a batch (the members' statuses say where each is).
    return _crd(
        api.BATCH_KIND, api.BATCH_PLURAL, api.BATCH_SINGULAR, api.BATCH_SHORT_NAMES, root, columns, status=False
    )


def _crd(
    kind: str,
    plural: str,
    singular: str,
    short_names: list[str],
    root: dict[str, Any],
    columns: list[dict[str, Any]],
    *,
    status: bool,
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": api.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
    }
    if status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": short_names,
                "categories": api.CATEGORIES,
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def render() -> str:
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)


def render_batch() -> str:
    return HEADER + yaml.safe_dump(batch_crd(), sort_keys=False, width=120)


def renders() -> dict[str, str]:
    """Every generated CRD file by its name."""
    return {CRD_FILENAME: render(), BATCH_CRD_FILENAME: render_batch()}


def targets(out_dir: Path, chart: Path | None) -> list[Path]:
    """Where the generated files go: crds/ and the chart's crds/."""
    dirs = [out_dir] + ([chart / "crds"] if chart is not None else [])
    return [d / name for d in dirs for name in renders()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[2]
    parser.add_argument("--out", type=Path, default=root / "crds")
    parser.add_argument("--chart", type=Path, default=root / "helm" / "swerollout")
    parser.add_argument("--check", action="store_true", help="fail when the checked-in files differ")
    args = parser.parse_args(argv)
    texts = renders()
    stale = []
    for path in targets(args.out, args.chart):
        text = texts[path.name]
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("stale CRD files (run `make crds`): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
