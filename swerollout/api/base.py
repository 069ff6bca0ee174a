"""Shared base for every API model: camelCase on the wire, snake_case in Python.

Field docstrings become the CRD's field descriptions (``use_attribute_docstrings``),
so a docstring is API documentation: say the meaning, unit, default and whether
the field may change after creation.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase, unset fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_patch(self) -> dict[str, Any]:
        """A JSON merge patch of the fields that were set: camelCase, and an explicit
        None kept as null, which clears that field on the server."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def cel(rule: str, message: str, *, reason: str | None = None, field_path: str | None = None) -> dict[str, Any]:
    """One ``x-kubernetes-validations`` entry (a CEL rule checked by the API server)."""
    out: dict[str, Any] = {"rule": rule, "message": message}
    if reason:
        out["reason"] = reason
    if field_path:
        out["fieldPath"] = field_path
    return out


def one_line(exc: ValidationError, root: str = "spec") -> str:
    """A validation error as one line naming the first bad field, e.g.
    `spec.agent.templates.nextStepTemplate: next_step_template uses unknown variable(s) ['x']; ...`."""
    first = exc.errors()[0]
    where = ".".join([root, *(str(p) for p in first["loc"])]) if root else ".".join(str(p) for p in first["loc"])
    # One line, whatever the validator's text holds.
    message = " ".join(str(first["msg"]).removeprefix("Value error, ").split())
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"
