"""Commands other distributions add (the dev tooling's, through the `swerollout.commands`
entry points) never break ours: a dev-mode pod's init container runs `swerollout
sandbox-bundle` in a sandbox that sees the environment's metadata but not the dev
tooling's sources, so that plugin's entry point is there and its module is not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from swerollout.cli.main import all_commands, main


def test_our_commands_run_when_a_plugin_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "dev" in all_commands()  # the entry point is installed here (make venv: -e ./dev)
    # ... and its package unimportable (None in sys.modules: "not installed" to the import system).
    for name in ["swerollout_dev", *(m for m in sys.modules if m.startswith("swerollout_dev."))]:
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["sandbox-bundle", "install", "--dest", str(tmp_path / "bundle")]) == 0
    assert (tmp_path / "bundle" / "bin" / "swerex-serve").is_file()
    # Listing skips the plugin it cannot load; calling one of its commands says where it comes from.
    assert "dev" not in all_commands() and "submit" in all_commands()
    assert main(["dev", "up"]) == 2
    assert "pip install -e ./dev" in capsys.readouterr().err
