"""Helpers shared by the eval tests (a module of its own: test files must not import conftest)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from agent_runner.sandbox import Sandbox
from swerollout.api.v1alpha1 import Instance

# The agent tests own the swerex-remote launcher; reuse it rather than keep a copy.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
from swerex_fixture import start_swerex  # noqa: E402

WRONG_PATCHES = Path(__file__).parent / "wrong_patches"

SandboxFactory = Callable[[Instance], AbstractAsyncContextManager[tuple[Sandbox, str]]]

__all__ = ["WRONG_PATCHES", "SandboxFactory", "start_swerex"]
