"""A command whose optional package is missing says so in one line naming the extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from swerollout.cli.main import main
from swerollout.extras import MissingExtra, require

PARQUET_HINT = "needs pyarrow, which is not installed: pip install 'swerollout[parquet]' (from a checkout: pip install -e '.[parquet]')"


def test_require_names_the_extra_and_what_needed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert require("json", "none", "a test") is json
    # None in sys.modules is how the import system spells "not installed"; the submodule
    # too, since an earlier test of the same run may have imported pyarrow.parquet already.
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")] + ["pyarrow"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingExtra) as caught:
        require("pyarrow.parquet", "parquet", "swerollout results --out FILE.parquet")
    assert isinstance(caught.value, ImportError) and caught.value.extra == "parquet"
    assert str(caught.value) == f"swerollout results --out FILE.parquet {PARQUET_HINT}"


def test_a_broken_dependency_of_an_installed_package_keeps_its_own_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The package is there and something it imports is not: not the extra's fault, not hidden.
    (tmp_path / "halfinstalled_i30.py").write_text("import absent_dependency_i30\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as caught:
        require("halfinstalled_i30", "some", "a test")
    assert not isinstance(caught.value, MissingExtra) and caught.value.name == "absent_dependency_i30"


def test_results_and_view_say_the_missing_extra_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))  # never read: the extra is checked first
    assert main(["results", "--batch", "b", "--out", str(tmp_path / "b.parquet")]) == 2
    (tmp_path / "b.parquet").write_bytes(b"PAR1")
    assert main(["view", "--from", str(tmp_path / "b.parquet")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: swerollout results --out FILE.parquet {PARQUET_HINT}",
        f"error: swerollout view --from FILE.parquet {PARQUET_HINT}",
    ]
