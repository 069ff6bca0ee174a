"""Load the CPU-safe, pure-Python parts of the pinned ``sglang`` wheel (installed --no-deps).

Importing ``sglang`` runs its package ``__init__``, which needs torch, orjson and the
rest of a GPU server's dependencies. These parts need none of that, so each file is
loaded under its real dotted name with bare parent packages that skip the
``__init__`` files. What cannot load this way (io_struct's GenerateReqInput imports
torch, zmq and the scheduler) is compared against the wheel's source text instead,
parsed with ``ast`` (see ``dataclass_fields``).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

SGLANG_VERSION = "0.5.23"


def wheel_root() -> Path:
    dist = distribution("sglang")
    assert dist.version == SGLANG_VERSION, f"the contract tests pin sglang {SGLANG_VERSION}, found {dist.version}"
    return Path(str(dist.locate_file("sglang")))


def load(dotted: str) -> types.ModuleType:
    """Import one module file of the wheel without running its packages' __init__."""
    if dotted in sys.modules:
        return sys.modules[dotted]
    root = wheel_root().parent
    parts = dotted.split(".")
    for depth in range(1, len(parts)):
        name = ".".join(parts[:depth])
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(root.joinpath(*parts[:depth]))]
            sys.modules[name] = package
    path = root.joinpath(*parts[:-1], parts[-1] + ".py")
    spec = importlib.util.spec_from_file_location(dotted, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[dotted] = module
    spec.loader.exec_module(module)
    return module


def source(relative: str) -> str:
    return (wheel_root() / relative).read_text(encoding="utf-8")


def dataclass_fields(relative: str, class_name: str) -> dict[str, Any]:
    """Field name -> default (``...`` when required) of a class in the wheel's source, by ``ast``."""
    tree = ast.parse(source(relative))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            fields: dict[str, Any] = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields[item.target.id] = ... if item.value is None else _literal(item.value)
            return fields
    raise LookupError(f"{class_name} not found in sglang/{relative}")


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)
