"""A small least-recently-used cache."""

from .lru import LRUCache

__all__ = ["LRUCache"]
