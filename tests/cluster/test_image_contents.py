"""Our image, as the chart's Deployment runs it, holds exactly the locked runtime set
(requirements-runtime.lock): nothing the lock does not name, at no other version, and the
operator and the runner both import from it."""

from __future__ import annotations

import json
import re
import tarfile
import tomllib
from pathlib import Path

from swerollout_dev.cluster.buildimage import IMAGE
from swerollout_dev.cluster.supervisor import RELEASE, RELEASE_NAMESPACE
from tests.support.locks import RUNTIME_LOCK, locked_pins, normalize
from tests.support.realnode import RealNode, swerollout_cli

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = "/opt/swerollout/bin/python"
BUNDLE_PYTHON = "/opt/swerex-bundle/python/bin/python3"
# What `python3 -m venv` puts into every venv (Debian's ensurepip wheels), beside the lock.
VENV_TOOLS = {"pip", "setuptools"}

# Every distribution the interpreter can import from, as pip list reads them; a name found
# twice (two dist-info directories) is reported as such rather than hidden by a dict.
_LIST = """
import importlib.metadata, json
print(json.dumps(sorted([d.metadata["Name"], d.version] for d in importlib.metadata.distributions())))
"""


def _in_operator_pod(node: RealNode, *argv: str) -> str:
    # Through the Deployment, so whichever pod it runs now answers.
    return node.kubectl_ok("exec", f"deployment/{RELEASE}", "-n", RELEASE_NAMESPACE, "--", *argv, timeout=300)


def _installed(node: RealNode, python: str) -> dict[str, str]:
    rows = json.loads(_in_operator_pod(node, python, "-c", _LIST))
    names = [normalize(name) for name, _version in rows]
    assert len(names) == len(set(names)), f"{python}: a distribution is installed twice: {sorted(rows)}"
    return {normalize(name): version for name, version in rows}


def test_the_operator_image_holds_exactly_the_runtime_lock(real_node: RealNode) -> None:
    _in_operator_pod(real_node, VENV_PYTHON, "-c", "import swerollout_operator, agent_runner, swerollout.cli.main")
    usage = _in_operator_pod(real_node, VENV_PYTHON, "-m", "swerollout_operator", "--help")
    assert usage.startswith("usage: swerollout_operator"), usage

    installed = _installed(real_node, VENV_PYTHON)
    pins = locked_pins(RUNTIME_LOCK)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert installed.pop(normalize(project["name"])) == project["version"]
    # uv installs the lock in the Dockerfile's venv stage, at the Dockerfile's pin.
    (uv_pin,) = re.findall(r"install --no-cache-dir uv==(\S+)", (ROOT / "Dockerfile").read_text())
    assert installed.pop("uv") == uv_pin
    tools = {name for name in installed if name in VENV_TOOLS and name not in pins}
    unlocked = sorted(set(installed) - set(pins) - tools)
    assert not unlocked, f"installed in the image but not in {RUNTIME_LOCK.name}: {unlocked}"
    missing = sorted(set(pins) - set(installed))
    assert not missing, f"pinned in {RUNTIME_LOCK.name} but not in the image: {missing}"
    differ = {name: (installed[name], version) for name, version in pins.items() if installed[name] != version}
    assert not differ, f"image version != {RUNTIME_LOCK.name} pin (image, lock): {differ}"


def test_the_swerex_bundle_holds_swerex_at_the_runtime_locks_pins(real_node: RealNode) -> None:
    bundled = _installed(real_node, BUNDLE_PYTHON)
    pins = locked_pins(RUNTIME_LOCK)
    assert "swe-rex" in bundled and "kopf" not in bundled
    unlocked = sorted(set(bundled) - set(pins))
    assert not unlocked, f"in the swerex bundle but not in {RUNTIME_LOCK.name}: {unlocked}"
    differ = {name: (version, pins[name]) for name, version in bundled.items() if pins[name] != version}
    assert not differ, f"bundle version != {RUNTIME_LOCK.name} pin (bundle, lock): {differ}"


# Every module the operator and the runner import from the image's venv, with whether its
# bytecode is on disk and valid as Python checks it (the source's mtime and size in the
# header): what Python would otherwise compile at every start, as the runtime user cannot
# write it.
_COMPILED = """
import importlib.util, json, os, sys
import swerollout_operator.__main__, agent_runner.pod.session, kopf, transformers
rows = []
for module in list(sys.modules.values()):
    source = getattr(module, "__file__", None) or ""
    if source.startswith("/opt/swerollout/") and source.endswith(".py"):
        try:
            with open(importlib.util.cache_from_source(source), "rb") as pyc:
                header = pyc.read(16)
        except FileNotFoundError:
            rows.append([source, False])
            continue
        st = os.stat(source)
        flags, mtime, size = (int.from_bytes(header[i:i + 4], "little") for i in (4, 8, 12))
        valid = header[:4] == importlib.util.MAGIC_NUMBER and (
            flags != 0 or (mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF))
        rows.append([source, valid])
print(json.dumps(rows))
"""


def test_the_image_ships_bytecode_for_what_the_operator_and_runner_import(real_node: RealNode) -> None:
    rows = json.loads(_in_operator_pod(real_node, VENV_PYTHON, "-c", _COMPILED))
    ours = [source for source, _ in rows if "/swerollout_operator/" in source or "/agent_runner/" in source]
    assert len(ours) > 20 and any("/kopf/" in source for source, _ in rows), rows[:5]
    stale = [source for source, fresh in rows if not fresh]
    assert not stale, f"{len(stale)} of {len(rows)} imported modules have no current bytecode: {stale[:10]}"


def test_build_image_prints_an_archive_of_our_image_that_containerd_imports(real_node: RealNode) -> None:
    done = swerollout_cli("cluster", "build-image", timeout=3600)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"image {IMAGE}: "), done.stdout
    archive = Path(first.split(": ", 1)[1])
    with tarfile.open(archive) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))  # type: ignore[arg-type]
    assert manifest["RepoTags"] == [IMAGE]
    # The Dockerfile's runtime stage: non-root, the operator as its command.
    assert config["config"]["User"] == "10001:10001"
    assert config["config"]["Cmd"] == ["python", "-m", "swerollout_operator"]
    real_node.import_image(archive)  # the hint it prints: ctr -n k8s.io images import
    assert f"ctr -n k8s.io images import {archive}" in done.stdout
