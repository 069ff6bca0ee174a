"""A tiny INI-style configuration reader."""

from .parser import ConfigError, get_bool, get_int, parse

__all__ = ["ConfigError", "get_bool", "get_int", "parse"]
