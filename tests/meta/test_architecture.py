"""Architecture rules that keep the codebase navigable, enforced in the suite."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    """operator and runner never import each other; the shared package imports neither."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_stdlib_operator_is_not_shadowed() -> None:
    """operator/ is a source folder, not a package: `import operator` is still the stdlib."""
    assert not (ROOT / "operator" / "__init__.py").exists()
    result = subprocess.run(
        [sys.executable, "-S", "-c", "import operator, sys; print(operator.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(result.stdout.strip()).is_relative_to(Path(sys.base_prefix))


def test_mypy_strict_is_clean() -> None:
    """mypy --strict over swerollout, agent_runner and swerollout_operator (config in pyproject.toml)."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in tests/support: a test module imported by another would
    run its tests twice under another name, and couple two areas' tests."""
    pattern = re.compile(r"^\s*(?:from|import)\s+tests(?:\.\w+)*\.test_\w+\b", re.MULTILINE)
    offenders = [
        f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for m in pattern.finditer(path.read_text())
    ]
    assert offenders == [], "move the helpers to tests/support:\n" + "\n".join(offenders)
