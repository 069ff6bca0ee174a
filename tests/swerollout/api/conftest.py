from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from swerollout_dev.controlplane import ControlPlane
from tests.support.cluster import checked, install_crd


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    install_crd(control_plane)


@pytest.fixture
def kubectl(control_plane: ControlPlane, crd: None) -> Callable[..., Any]:
    """The real kubectl against the session control plane, CRD installed; raises unless check=False."""
    return checked(control_plane.kubectl)
