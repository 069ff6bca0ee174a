"""Installing the CRD into the session control plane, and a checked kubectl."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swerollout_dev.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
CRD_NAME = "swerollouts.swerollout.io"
BATCH_CRD_NAME = "swerolloutbatches.swerollout.io"


def wait_established(plane: ControlPlane, *names: str) -> None:
    """Wait until each CRD is Established. `kubectl wait` fails at once ("accessor error")
    on a CRD whose status has no conditions yet, right after its creation: ask again."""
    for name in names:
        deadline = time.monotonic() + 60
        while True:
            result = plane.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
            if result.returncode == 0:
                break
            if "accessor error" not in result.stderr or time.monotonic() > deadline:
                raise RuntimeError(f"the CRD {name} never became established:\n{result.stderr}")
            time.sleep(0.2)


def install_crd(plane: ControlPlane) -> None:
    """Apply crds/ (server-side, idempotent) and wait until the API serves it."""
    result = plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    if result.returncode != 0:
        raise RuntimeError(f"installing the CRD failed:\n{result.stderr}")
    wait_established(plane, CRD_NAME, BATCH_CRD_NAME)
    # Discovery can lag the Established condition by a moment.
    deadline = time.monotonic() + 30
    for short in ("swer", "swerb"):
        while plane.kubectl("get", short, "-A").returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API server does not serve {short}")
            time.sleep(0.2)


def checked(
    run: Callable[..., subprocess.CompletedProcess[str]],
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Wrap a kubectl/helm runner: raise on failure unless check=False."""

    def call(*args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        result = run(*args, **kwargs)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    return call
