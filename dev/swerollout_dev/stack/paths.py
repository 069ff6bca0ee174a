"""Files of a dev environment, all under one directory (default ``./.swerollout/dev``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_DEV_DIR = Path(".swerollout") / "dev"


@dataclass(frozen=True)
class DevPaths:
    root: Path

    @classmethod
    def under(cls, workdir: str | Path | None) -> DevPaths:
        """``<workdir>/.swerollout/dev``, or ``./.swerollout/dev`` without a workdir."""
        base = Path(workdir) if workdir else Path.cwd()
        return cls((base / DEFAULT_DEV_DIR).resolve())

    @classmethod
    def owning(cls, kubeconfig: str | Path) -> DevPaths | None:
        """The dev environment whose admin kubeconfig this is (None: not a dev environment's)."""
        path = Path(kubeconfig).resolve()
        paths = cls(path.parent)
        return paths if path.name == "kubeconfig" and paths.state.is_file() else None

    @property
    def store(self) -> Path:
        """The operator's result store (file://)."""
        return self.root / "store"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig for the user (kubectl, the client)."""
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        """The supervisor's state file: its pid and each component's pid/status."""
        return self.root / "state.json"

    @property
    def lock(self) -> Path:
        return self.root / "supervisor.lock"

    @property
    def controlplane(self) -> Path:
        return self.root / "controlplane"

    @property
    def node(self) -> Path:
        """The node agent's root (pod directories and container logs)."""
        return self.root / "node"

    @property
    def logs(self) -> Path:
        """One log file per component."""
        return self.root / "logs"

    @property
    def operator_kubeconfig(self) -> Path:
        return self.root / "operator.kubeconfig"

    @property
    def inference_admin_key(self) -> Path:
        """The policy server's admin key (SGLang's --admin-api-key); pods never see this directory."""
        return self.root / "inference-admin.key"


def store_url_for_kubeconfig(kubeconfig: str) -> str | None:
    """The `swerollout.store_locators` entry point: a dev environment's file store, found from
    its admin kubeconfig (`swerollout results` and `view` need no --store-url against it)."""
    paths = DevPaths.owning(kubeconfig)
    return paths.store.as_uri() if paths is not None else None
