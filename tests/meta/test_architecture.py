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


def test_ruff_lint_and_format_are_clean() -> None:
    """The rule set and the layout in pyproject.toml's [tool.ruff], over the whole tree."""
    ruff = str(Path(sys.executable).parent / "ruff")
    lint = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout[-5000:] + lint.stderr[-2000:]
    layout = subprocess.run([ruff, "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert layout.returncode == 0, f"run `make format`:\n{layout.stdout[-5000:]}{layout.stderr[-2000:]}"


def test_make_help_lists_every_target() -> None:
    """Each target of the Makefile has its `## ` line, so `make help` is the whole list."""
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z][a-z-]*):(?!=)", makefile, flags=re.MULTILINE)
    assert "test" in targets and "test-unit" in targets
    undocumented = [t for t in targets if not re.search(rf"^{re.escape(t)}:[^\n]*## \S", makefile, flags=re.MULTILINE)]
    assert undocumented == []
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [line.split()[1] for line in listed.splitlines()] == targets


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
