"""Deterministic rollout names: the same (batch, sample, member) always maps to the
same object, which is what makes re-submitting a batch idempotent."""

from __future__ import annotations

import re

# Rollout names end up in label values (swerollout.io/rollout) and pod names: both
# are capped at 63 characters, so the whole name must fit a DNS-1123 label.
MAX_NAME = 63
MAX_BATCH = 40
_BATCH = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_batch_name(batch: str) -> str:
    """Return ``batch`` if it can prefix rollout names, else raise ValueError naming the fix."""
    if not batch or len(batch) > MAX_BATCH or not _BATCH.match(batch):
        raise ValueError(
            f"batch name {batch!r} is not usable: use 1-{MAX_BATCH} lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (e.g. 'step-0042')"
        )
    return batch


def rollout_name(batch: str, sample: int, member: int) -> str:
    """``<batch>-<sample>-<member>``, e.g. ``step-0042-17-3``."""
    if sample < 0 or member < 0:
        raise ValueError(f"sample ({sample}) and member ({member}) must be >= 0")
    name = f"{check_batch_name(batch)}-{sample}-{member}"
    if len(name) > MAX_NAME:
        raise ValueError(f"rollout name {name!r} is longer than {MAX_NAME} characters; use a shorter batch name")
    return name
