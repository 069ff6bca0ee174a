"""The layers contracts are not decoration: an upward import or a cycle fails them.

Each case copies our four packages' sources, adds one import that breaks a layer, and
runs lint-imports with pyproject.toml's own contracts over the copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"swerollout": ".", "agent_runner": ".", "swerollout_operator": "operator", "swerollout_dev": "dev"}


def _lint_copy(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    for package, where in PACKAGES.items():
        shutil.copytree(
            ROOT / where / package,
            tmp_path / where / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.json", "*.yaml", "*.js", "*.css"),
        )
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(tmp_path / w) for w in (".", "operator", "dev"))}
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("module", "line", "contract", "edge"),
    [
        # The API models reaching up into the client: an upward import.
        ("swerollout/api/__init__.py", "import swerollout.client", "the library's layers", "swerollout.api"),
        # The phase machine importing the reconciler, which imports it: a cycle.
        (
            "operator/swerollout_operator/phases.py",
            "from swerollout_operator import reconciler",
            "the operator's layers",
            "swerollout_operator.phases",
        ),
        # The SGLang client importing the session that drives it.
        (
            "agent_runner/policy/sglang.py",
            "import agent_runner.pod.session",
            "the runner's layers",
            "agent_runner.policy.sglang",
        ),
    ],
)
def test_a_layer_breach_fails_lint_imports(tmp_path: Path, module: str, line: str, contract: str, edge: str) -> None:
    result = _lint_copy(tmp_path, module, line)
    assert result.returncode != 0, result.stdout
    assert f"{contract} BROKEN" in result.stdout
    assert edge in result.stdout


def test_the_unchanged_copy_keeps_every_contract(tmp_path: Path) -> None:
    """The same copy without the breach passes: the failures above are the added line's."""
    result = _lint_copy(tmp_path, "swerollout/api/__init__.py", "# nothing added")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
