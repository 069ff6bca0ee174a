"""Generate the configuration reference (docs/api-reference.md) from the API models.

It walks the same structural schema the CRD is made of, so the reference, the CRD
and `kubectl explain` always agree. `make crds` writes it; a test fails on drift.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from . import crdgen
from . import v1alpha1 as api

HEADER = """# SWERollout v1alpha1: configuration reference

Generated from `swerollout/api/v1alpha1.py` by `make crds`; do not edit.
Group `swerollout.io`, kind `SWERollout`, short name `swer`. Every field below is
also documented by `kubectl explain swerollout.<path>`.

"""


def _type(node: dict[str, Any]) -> str:
    kind = str(node.get("type", "object"))
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object" and "additionalProperties" in node:
        return f"map of {_type(node['additionalProperties'])}"
    return kind


def _bounds(node: dict[str, Any]) -> str:
    parts = []
    if "minimum" in node:
        parts.append(f"{'>' if node.get('exclusiveMinimum') else '>='} {node['minimum']}")
    if "maximum" in node:
        parts.append(f"<= {node['maximum']}")
    if "maxLength" in node:
        parts.append(f"max {node['maxLength']} chars")
    if "maxItems" in node:
        parts.append(f"max {node['maxItems']} items")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    return ", ".join(parts)


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return ""
    value = node["default"]
    if value == "":
        return '`""`'
    if isinstance(value, (dict, list)) and len(str(value)) > 40:
        return "(see fields)"
    return f"`{value}`"


def _rows(node: dict[str, Any], path: str, required: bool, out: list[str]) -> None:
    description = " ".join(str(node.get("description", "")).split()).replace("|", "\\|")
    rules = [r["message"] for r in node.get("x-kubernetes-validations", [])]
    if rules:
        description += " " + " ".join(f"*Rule: {m}.*" for m in rules)
    out.append(
        f"| `{path}` | {_type(node)} | {'yes' if required else ''} | {_default(node)} | {_bounds(node)} | {description} |"
    )
    children = node.get("properties") or {}
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        children = node["items"].get("properties") or {}
        path = path + "[]"
    needed = set(node.get("required", []) if node.get("type") != "array" else node.get("items", {}).get("required", []))
    for name, child in children.items():
        _rows(child, f"{path}.{name}", name in needed, out)


def member_docs(enum_cls: type) -> dict[str, str]:
    """Each enum member's value and the docstring written under it in the source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(enum_cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = getattr(enum_cls, node.targets[0].id).value
            text = ""
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                text = " ".join(after.value.value.split())
            docs[value] = text
    return docs


def render() -> str:
    schema = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = [HEADER]
    for section in ("spec", "status"):
        node = schema["properties"][section]
        out.append(f"## {section}\n")
        out.append(" ".join(str(node.get("description", "")).split()) + "\n")
        out.append("| field | type | required | default | bounds | description |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        rows: list[str] = []
        for name, child in (node.get("properties") or {}).items():
            _rows(child, f"{section}.{name}", name in set(node.get("required", [])), rows)
        out.extend(rows)
        out.append("")
    batch = crdgen.batch_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out.append(f"## {api.BATCH_KIND}\n")
    out.append(
        f"Group `{api.GROUP}`, kind `{api.BATCH_KIND}`, short name `{api.BATCH_SHORT_NAMES[0]}`. "
        + " ".join(str(batch.get("description", "")).split())
        + "\n"
    )
    out.append("| field | type | required | default | bounds | description |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    batch_rows: list[str] = []
    _rows(batch["properties"]["spec"], "spec", True, batch_rows)
    out.extend(batch_rows)
    out.append("")
    for title, enum_cls in (("Condition types", api.ConditionType), ("Agent kinds", api.AgentKind)):
        out.append(f"## {title}\n")
        for member, doc in member_docs(enum_cls).items():
            out.append(f"- `{member}`: {doc}")
        out.append("")
    return "\n".join(out)


def main() -> int:
    target = Path(__file__).resolve().parents[2] / "docs" / "api-reference.md"
    if "--check" in sys.argv[1:]:
        if not target.exists() or target.read_text() != render():
            print(f"{target} is stale: run `make crds`", file=sys.stderr)
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render())
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
