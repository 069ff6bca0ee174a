"""Configuration of the node agent (passed in explicitly, never read from globals)."""

from __future__ import annotations

import fnmatch
import socket
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_RUNNER_IMAGES = (
    "ghcr.io/swerollout/swerollout:*",
    "swerollout:*",
    "ghcr.io/swerollout/swerollout",
    "swerollout",
)


class NodeAgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_name: str = "local"
    """Name of the Node object this agent registers and serves."""

    root_dir: Path
    """Where pod directories (volumes, checkouts, logs, pidfiles) live. Must survive
    an agent restart: re-adoption reads the pidfiles kept here."""

    runner_images: tuple[str, ...] = DEFAULT_RUNNER_IMAGES
    """Glob patterns of image names that map to the installed Python environment
    (the runner/operator image)."""

    python_bin_dir: Path = Field(default_factory=lambda: Path(sys.executable).parent)
    """The bin directory of the Python environment that runner images map to; put
    first on PATH of such containers."""

    isolation: Literal["auto", "bwrap", "none"] = "auto"
    """auto: use bubblewrap when `bwrap` is installed, else run unisolated and say so
    in the pod status. bwrap: require it. none: never isolate (tests, debugging)."""

    hidden_paths: tuple[Path, ...] = ()
    """Host paths no container may see under bubblewrap, besides ``root_dir`` (e.g. the dev
    directory holding the admin kubeconfig: pods get no Kubernetes credentials)."""

    runner_paths: tuple[Path, ...] = ()
    """Host paths runner-image containers also see under bubblewrap, read-only (e.g. a tokenizer
    directory that spec.inference.tokenizer names). They see nothing else of the host beyond
    isolation.visible_host_paths; sandbox containers never see these."""

    network: Literal["auto", "isolated", "host"] = "auto"
    """auto: give each pod its own network namespaces when this agent can (root, ``ip``,
    ``nsenter``), else share the host network and say so in the pod status.
    isolated: require it. host: never (tests, debugging)."""

    egress: tuple[str, ...] = ()
    """host:port addresses on the host that pods' runner containers may reach (the
    operator's ingest API, the policy server); nothing else is reachable from a pod."""

    taint: bool = True
    """Register the Node with taint swerollout.io/local=true:NoSchedule, so only pods
    that tolerate it are bound here."""

    labels: dict[str, str] = Field(default_factory=lambda: {"swerollout.io/node-agent": "local"})
    """Labels of the Node object."""

    status_interval_seconds: float = 10.0
    """How often the Node's Ready heartbeat is refreshed."""

    probe_period_seconds: float | None = None
    """Overrides every readiness probe's periodSeconds (tests use a small value);
    None keeps what the pod says."""

    @property
    def seccomp_file(self) -> Path:
        """The compiled seccomp filter every bubblewrap container loads (see seccomp.py)."""
        return self.root_dir / "seccomp.bpf"

    @property
    def mask_dir(self) -> Path:
        """Where the empty, unreadable file and directory bound over private host entries live (see isolation.Masks)."""
        return self.root_dir / "mask"

    def egress_addresses(self) -> list[tuple[str, int]]:
        """``egress`` as (IPv4 address, port); names are resolved once, here."""
        return parse_egress(self.egress, "egress")

    def is_runner_image(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.runner_images)


def parse_egress(items: tuple[str, ...] | list[str], where: str) -> list[tuple[str, int]]:
    """host:port strings as (IPv4 address, port), resolving names (blocking)."""
    out = []
    for item in items:
        host, sep, port = item.strip().rpartition(":")
        if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
            raise ValueError(f"{where}: {item!r} is not HOST:PORT (e.g. 127.0.0.1:30000)")
        try:
            out.append((socket.gethostbyname(host.strip("[]")), int(port)))
        except OSError as exc:
            raise ValueError(f"{where}: cannot resolve {host!r}: {exc}") from exc
    return out
