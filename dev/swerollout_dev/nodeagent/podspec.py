"""The part of the Kubernetes Pod object the node agent acts on.

Pods carry many fields this agent does not implement (resources, security
contexts, ...). The API server has already validated them, so these models
ignore unknown fields instead of rejecting them (``extra="ignore"``) — the one
deliberate exception to extra="forbid": a kubelet must run pods whose spec is
richer than what it reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _K8s(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class KeyToPath(_K8s):
    key: str
    path: str
    mode: int | None = None


class SecretVolume(_K8s):
    secret_name: str
    items: list[KeyToPath] | None = None
    default_mode: int = 0o644
    optional: bool = False


class ConfigMapVolume(_K8s):
    name: str
    items: list[KeyToPath] | None = None
    default_mode: int = 0o644
    optional: bool = False


class EmptyDirVolume(_K8s):
    medium: str | None = None


class Volume(_K8s):
    name: str
    secret: SecretVolume | None = None
    config_map: ConfigMapVolume | None = None
    empty_dir: EmptyDirVolume | None = None


class KeySelector(_K8s):
    name: str
    key: str
    optional: bool = False


class FieldSelector(_K8s):
    field_path: str


class EnvVarSource(_K8s):
    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: FieldSelector | None = None


class EnvVar(_K8s):
    name: str
    value: str | None = None
    value_from: EnvVarSource | None = None


class NameRef(_K8s):
    name: str
    optional: bool = False


class EnvFromSource(_K8s):
    prefix: str = ""
    config_map_ref: NameRef | None = None
    secret_ref: NameRef | None = None


class VolumeMount(_K8s):
    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str = ""


class ExecAction(_K8s):
    command: list[str]


class HttpGetAction(_K8s):
    path: str = "/"
    port: int | str
    host: str | None = None
    scheme: Literal["HTTP", "HTTPS"] = "HTTP"


class TcpSocketAction(_K8s):
    port: int | str
    host: str | None = None


class Probe(_K8s):
    exec: ExecAction | None = None
    http_get: HttpGetAction | None = None
    tcp_socket: TcpSocketAction | None = None
    initial_delay_seconds: float = 0
    period_seconds: float = 10
    timeout_seconds: float = 1
    success_threshold: int = 1
    failure_threshold: int = 3


class ContainerPort(_K8s):
    container_port: int
    name: str | None = None


class ResourceRequirements(_K8s):
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)


class Container(_K8s):
    name: str
    image: str = ""
    command: list[str] | None = None
    args: list[str] | None = None
    working_dir: str | None = None
    env: list[EnvVar] = Field(default_factory=list)
    env_from: list[EnvFromSource] = Field(default_factory=list)
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    readiness_probe: Probe | None = None
    ports: list[ContainerPort] = Field(default_factory=list)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Only limits.memory is enforced (memlimit.py)."""

    def named_port(self, port: int | str) -> int:
        if isinstance(port, int):
            return port
        if port.isdigit():
            return int(port)
        for p in self.ports:
            if p.name == port:
                return p.container_port
        raise ValueError(f"container {self.name!r} has no port named {port!r}")


class Toleration(_K8s):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: str | None = None


class PodSpec(_K8s):
    containers: list[Container]
    init_containers: list[Container] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)
    restart_policy: Literal["Always", "OnFailure", "Never"] = "Always"
    active_deadline_seconds: int | None = None
    termination_grace_period_seconds: int = 30
    node_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    scheduling_gates: list[dict[str, Any]] = Field(default_factory=list)


class ObjectMeta(_K8s):
    name: str
    namespace: str = "default"
    uid: str = ""
    resource_version: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None


class Pod(_K8s):
    metadata: ObjectMeta
    spec: PodSpec
    status: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


def tolerates(tolerations: list[Toleration], key: str, value: str, effect: str) -> bool:
    """Whether the tolerations admit a taint key=value:effect (Kubernetes matching rules)."""
    for t in tolerations:
        if t.effect and t.effect != effect:
            continue
        if t.key is None and t.operator == "Exists":
            return True
        if t.key != key:
            continue
        if t.operator == "Exists" or (t.value or "") == value:
            return True
    return False
