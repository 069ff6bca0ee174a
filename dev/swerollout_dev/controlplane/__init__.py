"""A local Kubernetes control plane (etcd + kube-apiserver) for tests and dev.

See :mod:`swerollout_dev.controlplane.manager` for what runs and what does not.
"""

from swerollout_dev.controlplane.manager import (
    ControlPlane,
    ControlPlaneConfig,
    ControlPlaneError,
    StartupFailed,
    WorkdirBusy,
    discard_data,
    free_port,
)

__all__ = [
    "ControlPlane",
    "ControlPlaneConfig",
    "ControlPlaneError",
    "StartupFailed",
    "WorkdirBusy",
    "discard_data",
    "free_port",
]
