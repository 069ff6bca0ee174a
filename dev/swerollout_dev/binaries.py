"""Where the control-plane binaries live (kube-apiserver, kubectl, etcd, helm).

The binaries are built once from Go modules by ``hack/k8s-bin/build.sh`` into a cache
directory named after their versions. That script is the single place the versions
are written down: this module reads them from it, so the two cannot drift. (An
installed copy of the package without the repository falls back to the versions
below, which a test keeps equal to the script's.)

Lookup order: ``$SWEROLLOUT_BIN_DIR``, else the cache dir build.sh uses
(``${XDG_CACHE_HOME:-~/.cache}/swerollout/bin/k8s-<v>_etcd-<v>_helm-<v>``). When a
binary is missing and the build script is present, the script is run (minutes for
kube-apiserver, once); otherwise :class:`BinariesNotFound` says how to build them.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "k8s-bin" / "build.sh"

# Used only when build.sh is not around (an installed wheel); tests keep these equal.
_FALLBACK_VERSIONS = {"kubernetes": "v1.36.3", "etcd": "v3.6.13", "helm": "v3.22.0"}


class BinariesError(RuntimeError):
    """Root error of this module. Retrying does not help: something must be built or fixed."""


class BinariesNotFound(BinariesError):
    """A binary is missing and could not be built here."""


class BinaryVersionMismatch(BinariesError):
    """A binary exists but reports a different version than the one we pin."""


class ToolVersions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kubernetes: str
    """Version of kube-apiserver and kubectl, with the leading ``v`` (``v1.36.3``)."""
    etcd: str
    """etcd version with the leading ``v``."""
    helm: str
    """helm version with the leading ``v``."""


class Binaries(BaseModel):
    """Absolute paths of the four binaries, all from one versioned directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path
    versions: ToolVersions
    kube_apiserver: Path
    kubectl: Path
    etcd: Path
    helm: Path


def pinned_versions(script: Path = BUILD_SCRIPT) -> ToolVersions:
    """The versions build.sh builds, read from the script itself."""
    if not script.is_file():
        return ToolVersions(**_FALLBACK_VERSIONS)
    text = script.read_text()
    found: dict[str, str] = {}
    for key, var in (("kubernetes", "K8S_VERSION"), ("etcd", "ETCD_VERSION"), ("helm", "HELM_VERSION")):
        match = re.search(rf'^{var}="([^"]+)"', text, re.MULTILINE)
        if match is None:
            raise BinariesError(
                f'{script} no longer defines {var}="..."; update dev/swerollout_dev/binaries.py to match'
            )
        found[key] = match.group(1)
    return ToolVersions(**found)


def bin_dir(versions: ToolVersions | None = None) -> Path:
    """The directory holding the binaries (same rule as build.sh)."""
    override = os.environ.get("SWEROLLOUT_BIN_DIR")
    if override:
        return Path(override).expanduser()
    v = versions or pinned_versions()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "swerollout" / "bin" / f"k8s-{v.kubernetes}_etcd-{v.etcd}_helm-{v.helm}"


def _version_checks(v: ToolVersions) -> dict[str, tuple[list[str], str]]:
    # binary -> (version arguments, text its output must contain); mirrors build.sh.
    return {
        "etcd": (["--version"], f"etcd Version: {v.etcd.lstrip('v')}"),
        "helm": (["version", "--short"], v.helm),
        "kubectl": (["version", "--client"], v.kubernetes),
        "kube-apiserver": (["--version"], f"Kubernetes {v.kubernetes}"),
    }


# (path, mtime_ns) that already answered the right version in this process; running
# four --version commands on every ControlPlane start would cost about a second.
_verified: set[tuple[str, int]] = set()
_lock = threading.Lock()


def binary_version_output(path: Path, args: list[str]) -> str:
    """What ``path args...`` prints (stdout and stderr together)."""
    proc = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60, check=False)
    return proc.stdout + proc.stderr


def _is_good(path: Path, args: list[str], expect: str) -> bool:
    if not (path.is_file() and os.access(path, os.X_OK)):
        return False
    key = (str(path), path.stat().st_mtime_ns)
    if key in _verified:
        return True
    if expect not in binary_version_output(path, args):
        return False
    _verified.add(key)
    return True


def find_binaries(*, build_if_missing: bool = True) -> Binaries:
    """Locate (and if needed build) the binaries and check their versions.

    Raises BinariesNotFound when a binary is missing and cannot be built here, and
    BinaryVersionMismatch when ``$SWEROLLOUT_BIN_DIR`` holds other versions.
    """
    versions = pinned_versions()
    directory = bin_dir(versions)
    checks = _version_checks(versions)
    with _lock:
        bad = [name for name, (args, expect) in checks.items() if not _is_good(directory / name, args, expect)]
        if bad and build_if_missing and BUILD_SCRIPT.is_file():
            # The build's progress goes straight to our stderr: it can take many minutes.
            log.warning("building %s into %s with %s (one time)", ", ".join(bad), directory, BUILD_SCRIPT)
            env = dict(os.environ, SWEROLLOUT_BIN_DIR=str(directory))
            proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, stdout=subprocess.PIPE, text=True, check=False)
            if proc.returncode != 0:
                raise BinariesNotFound(
                    f"building {', '.join(bad)} with {BUILD_SCRIPT} failed (exit {proc.returncode}); "
                    f"its error output is above. It needs Go (GOTOOLCHAIN=local) and the Go module proxy."
                )
            bad = [name for name, (args, expect) in checks.items() if not _is_good(directory / name, args, expect)]
        if bad:
            missing = [name for name in bad if not (directory / name).is_file()]
            if missing:
                raise BinariesNotFound(
                    f"missing {', '.join(missing)} in {directory}. Build them once with "
                    f"`hack/k8s-bin/build.sh` from a swerollout checkout (needs Go), or point "
                    f"SWEROLLOUT_BIN_DIR at a directory holding kube-apiserver/kubectl "
                    f"{versions.kubernetes}, etcd {versions.etcd} and helm {versions.helm}"
                )
            raise BinaryVersionMismatch(
                f"{', '.join(bad)} in {directory} do not report the pinned versions "
                f"(kubernetes {versions.kubernetes}, etcd {versions.etcd}, helm {versions.helm}); "
                f"rebuild with hack/k8s-bin/build.sh or fix SWEROLLOUT_BIN_DIR"
            )
    return Binaries(
        dir=directory,
        versions=versions,
        kube_apiserver=directory / "kube-apiserver",
        kubectl=directory / "kubectl",
        etcd=directory / "etcd",
        helm=directory / "helm",
    )
