"""Which dataset a row comes from, and the image its publishers built for it.

Each dataset names its prebuilt images by one rule (Docker Hub forbids ``__`` in names,
so every one rewrites the double underscore of SWE-bench style ids):

- SWE-bench (full, Lite, Verified, Multimodal): ``swebench/sweb.eval.x86_64.<id>`` with
  ``__`` -> ``_1776_``, as swebench's own image spec writes it;
- SWE-Gym: ``xingyaoww/sweb.eval.x86_64.<id>`` with ``__`` -> ``_s_``;
- SWE-rebench: ``swerebench/sweb.eval.x86_64.<id>`` with ``__`` -> ``_1776_`` (rows usually
  carry it as ``docker_image``);
- SWE-smith: one image per repository snapshot, ``jyangballin/swesmith.x86_64.<owner>_1776_<repo>.<commit>``,
  from the row's ``repo`` (``swesmith/<owner>__<repo>.<commit>``; rows carry it as ``image_name``).

A row that names its image keeps it; ``--image-template`` overrides both (a mirror registry).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["IMAGE_FIELDS", "TEMPLATE_FIELDS", "DatasetKind", "detect_kind", "image_for", "published_image"]

# Where rows name their image, in the order we trust them.
IMAGE_FIELDS = ("image", "image_name", "docker_image")


class DatasetKind(str, Enum):
    SWE_BENCH = "swe-bench"
    """SWE-bench, Lite, Verified and Multimodal (and rows of our own in the same format)."""
    SWE_GYM = "swe-gym"
    SWE_SMITH = "swe-smith"
    SWE_REBENCH = "swe-rebench"


# Marks in a dataset's name or path that say which one it is (SWE-Gym/SWE-Gym,
# nebius/SWE-rebench, SWE-bench/SWE-smith, swe_gym_lite.parquet, ...).
_NAME_MARKS = (
    ("gym", DatasetKind.SWE_GYM),
    ("smith", DatasetKind.SWE_SMITH),
    ("rebench", DatasetKind.SWE_REBENCH),
)


def detect_kind(row: Mapping[str, Any], source_name: str = "") -> DatasetKind:
    """The dataset of ``row``: from its shape when that tells, else from the source's name.

    SWE-Gym rows have exactly SWE-bench's shape, so only the name tells them apart: pass
    ``--dataset swe-gym`` when the file name does not say "gym".
    """
    if "install_config" in row:
        return DatasetKind.SWE_REBENCH
    if str(row.get("image_name") or "").startswith("jyangballin/swesmith") or str(row.get("repo") or "").startswith(
        "swesmith/"
    ):
        return DatasetKind.SWE_SMITH
    folded = source_name.lower().replace("_", "").replace("-", "")
    for mark, kind in _NAME_MARKS:
        if mark in folded:
            return kind
    return DatasetKind.SWE_BENCH


def _docker_id(instance_id: str, dunder: str) -> str:
    return instance_id.replace("__", dunder).lower()


def published_image(kind: DatasetKind, row: Mapping[str, Any]) -> str:
    """The image the dataset's publishers built for ``row`` (their naming rule)."""
    instance_id = str(row["instance_id"])
    if kind is DatasetKind.SWE_GYM:
        return f"xingyaoww/sweb.eval.x86_64.{_docker_id(instance_id, '_s_')}:latest"
    if kind is DatasetKind.SWE_REBENCH:
        return f"swerebench/sweb.eval.x86_64.{_docker_id(instance_id, '_1776_')}:latest"
    if kind is DatasetKind.SWE_SMITH:
        snapshot = str(row.get("repo") or "").removeprefix("swesmith/")
        if not snapshot or "__" not in snapshot:
            raise ValueError(
                f"{instance_id}: a SWE-smith row needs image_name or repo 'swesmith/<owner>__<repo>.<commit>' "
                f"to name its image, got repo {row.get('repo')!r}; pass --image-template"
            )
        return f"jyangballin/swesmith.x86_64.{_docker_id(snapshot, '_1776_')}:latest"
    return f"swebench/sweb.eval.x86_64.{_docker_id(instance_id, '_1776_')}:latest"


TEMPLATE_FIELDS = {
    "instance_id": "the id as published",
    "id_1776": "the id with __ -> _1776_, lowercase (SWE-bench's rule)",
    "id_s": "the id with __ -> _s_, lowercase (SWE-Gym's rule)",
    "repo": "owner/name",
    "version": "the row's version",
}


def _template_values(row: Mapping[str, Any]) -> dict[str, str]:
    instance_id = str(row["instance_id"])
    return {
        "instance_id": instance_id,
        "id_1776": _docker_id(instance_id, "_1776_"),
        "id_s": _docker_id(instance_id, "_s_"),
        "repo": str(row.get("repo") or ""),
        "version": str(row.get("version") or ""),
    }


def image_for(kind: DatasetKind, row: Mapping[str, Any], template: str | None = None) -> str:
    """``template`` if given, else the image the row names, else the dataset's naming rule."""
    if template:
        used = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        unknown = sorted(used - set(TEMPLATE_FIELDS))
        if unknown:
            known = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
            raise ValueError(f"--image-template {template!r} uses {unknown}; the known fields are {known}")
        return template.format_map(_template_values(row))
    for field in IMAGE_FIELDS:
        value = row.get(field)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return published_image(kind, row)
