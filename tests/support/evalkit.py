"""Helpers shared by the eval tests (a module of its own: test files must not import conftest)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from agent_runner.sandbox import Sandbox
from swerollout.api.v1alpha1 import Instance
from tests.support.swerex_fixture import start_swerex

WRONG_PATCHES = Path(__file__).resolve().parents[1] / "agent_runner" / "eval" / "wrong_patches"

SandboxFactory = Callable[[Instance], AbstractAsyncContextManager[tuple[Sandbox, str]]]

__all__ = ["WRONG_PATCHES", "SandboxFactory", "start_swerex"]
