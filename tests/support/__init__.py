"""Helpers shared by test areas (not fixtures: each area's conftest wires them)."""
