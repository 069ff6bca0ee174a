"""Small string helpers for command-line output."""

from .strings import pad_center, slugify, truncate

__all__ = ["pad_center", "slugify", "truncate"]
