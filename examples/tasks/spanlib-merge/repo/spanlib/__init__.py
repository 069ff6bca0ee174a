"""Closed integer intervals."""

from .intervals import gaps, intersect, merge

__all__ = ["gaps", "intersect", "merge"]
