"""What each install role pulls in: a trainer's `pip install swerollout` stays light.

The library (api, wire, store, kube, client, instances, CLI) must import in a venv
that has none of the operator's, the runner's or the dev stack's dependencies, so a
trainer never pays for kopf, swe-rex, transformers or torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
HEAVY = ("kopf", "swerex", "transformers", "torch", "tokenizers", "aiohttp", "cryptography")

_PROBE = """
import importlib.util, json, sys
import swerollout.client, swerollout.cli.main, swerollout.instances, swerollout.store
heavy = {name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]}
print(json.dumps(heavy))
"""


def test_library_installs_and_imports_without_role_dependencies(tmp_path: Path) -> None:
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            ".swerollout",
            "build",
            "*.egg-info",
            "tests",
            "__pycache__",
            ".mypy_cache",
            ".pytest_cache",
        ),
    )
    venv = tmp_path / "trainer-venv"
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    # The lock pins versions; `pip install .` without extras decides which packages come in.
    install = subprocess.run(
        [str(UV), "pip", "install", "-q", "--python", str(python), "-c", str(ROOT / "requirements.lock"), str(source)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    probe = subprocess.run(
        [str(python), "-c", _PROBE, *HEAVY],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    present = {name for name, found in json.loads(probe.stdout).items() if found}
    assert present == set(), f"a bare install pulled in {sorted(present)}"
    help_text = subprocess.run(
        [str(venv / "bin" / "swerollout"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert help_text.returncode == 0, help_text.stderr[-3000:]
    assert "submit" in help_text.stdout
    # The dev tooling is its own distribution (dev/): none of its code is in this install,
    # and its commands say where they come from instead of failing on an import.
    files = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('swerollout')))"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert files.returncode == 0, files.stderr[-3000:]
    shipped = files.stdout.splitlines()
    assert any(f.startswith("swerollout/client/") for f in shipped)
    assert not [f for f in shipped if f.startswith(("swerollout_dev", "swerollout/dev/"))]
    assert "dev up" not in help_text.stdout and "policy-server" not in help_text.stdout
    dev_up = subprocess.run(
        [str(venv / "bin" / "swerollout"), "dev", "up"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert dev_up.returncode == 2
    assert "pip install -e ./dev" in dev_up.stderr and "Traceback" not in dev_up.stderr
    # A command that needs an extra this install lacks says which, in one line (HEAVY has no
    # pyarrow, so check it is absent here too).
    assert importlib_absent(python, "pyarrow")
    (tmp_path / "b.parquet").write_bytes(b"PAR1")
    for argv, needs in (
        (["results", "--batch", "b", "--out", "b.parquet"], "swerollout results --out FILE.parquet needs pyarrow"),
        (["view", "--from", "b.parquet"], "swerollout view --from FILE.parquet needs pyarrow"),
    ):
        done = subprocess.run(
            [str(venv / "bin" / "swerollout"), *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert done.returncode == 2, done.stderr[-3000:]
        assert done.stderr.splitlines() == [
            f"error: {needs}, which is not installed: pip install 'swerollout[parquet]' "
            "(from a checkout: pip install -e '.[parquet]')"
        ], done.stderr[-3000:]


def importlib_absent(python: Path, module: str) -> bool:
    found = subprocess.run(
        [str(python), "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is not None)"],
        capture_output=True,
        timeout=120,
    )
    return found.returncode == 0
