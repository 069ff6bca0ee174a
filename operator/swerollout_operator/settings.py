"""Operator settings: one pydantic model, filled from flags or environment by __main__.

Every field says its unit, default and why it exists. Nothing here is read from
globals elsewhere: the settings object is passed in explicitly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OperatorSettings(BaseModel):
    """Each field is also a command-line flag of the same name (flags.py): `store_url` is `--store-url`."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _cluster_wide_watches_every_namespace(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("cluster_wide") and "namespaces" not in values:
            return {**values, "namespaces": []}
        return values

    namespaces: list[str] = Field(default_factory=lambda: ["default"])
    """Namespaces to watch. Empty with `cluster_wide` means every namespace."""
    cluster_wide: bool = False
    """Watch every namespace (needs the chart's ClusterRole)."""
    service_account_dir: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount")
    """Where the pod's ServiceAccount identity is mounted (token, ca.crt, namespace), read
    when no --kubeconfig is given; with KUBERNETES_SERVICE_HOST/PORT it is all the operator
    needs. Another directory runs it under a ServiceAccount outside a pod (the lifecycle
    bench measures the operator so, as the chart runs it)."""

    runner_image: str = "ghcr.io/swerollout/swerollout:0.1.0"
    """Image of the init (swerex bundle) and runner containers."""
    runner_image_pull_policy: str = "IfNotPresent"
    """imagePullPolicy of the init and runner containers."""

    ingest_url: str = "http://swerollout-operator.swerollout-system.svc:8081"
    """Base URL at which runner containers reach the operator's ingest API."""
    ingest_port: int = Field(default=8081, ge=1, le=65535)
    """Port the ingest API listens on inside the operator."""
    metrics_port: int = Field(default=8080, ge=1, le=65535)
    """Port of /metrics, /healthz and /readyz."""
    bind_host: str = "0.0.0.0"
    """Address the operator's HTTP servers bind to (127.0.0.1 in the embedded dev mode)."""

    token_key_file: Path | None = None
    """File with the operator's secret key; per-rollout ingest tokens are derived from it
    (HMAC), so tokens survive restarts without being stored. Unset: a random key per
    process (tokens then change on restart; fine only for tests)."""

    sandbox_port: int = Field(default=8880, ge=1, le=65535)
    """Port swerex-remote listens on inside the pod (loopback only)."""
    runner_resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    )
    """Resources of the runner container."""
    pod_active_deadline_seconds: int = Field(default=86400, ge=60)
    """Hard upper bound on a rollout pod's life (seconds): a safety net against leaks;
    normal cleanup deletes pods long before."""
    extra_tolerations: list[dict[str, object]] = Field(default_factory=list)
    """Tolerations added to every pod (the embedded dev mode adds the local node's)."""
    extra_node_selector: dict[str, str] = Field(default_factory=dict)
    """nodeSelector entries added to every pod."""

    store_url: str = "file:///data"
    """Result store: `file:///path` (a PVC by default) or `s3://bucket/prefix`."""
    s3_endpoint_url: str | None = None
    """Endpoint of an S3-compatible server (MinIO, Ceph); unset for AWS."""

    api_http2: bool = True
    """Talk HTTP/2 to the API server: every request multiplexed on one TLS connection.
    A burst of writes ran 2.3x faster at 0.42x the client CPU per request than HTTP/1.1
    on 64 connections (bench/kube_client.py). `--no-api-http2` falls back to HTTP/1.1
    (an API server or proxy without h2 is also served HTTP/1.1 without it)."""
    api_max_in_flight: int = Field(default=64, ge=1, le=1000)
    """API requests (not watches) on the wire at once; the rest wait their turn in the
    operator, not in the HTTP connection pool."""
    workers: int = Field(default=64, ge=1, le=256)
    """Reconcile passes that run at once (each rollout is worked on by one at a time). A pass
    makes one API request at a time, so as many as --api-max-in-flight: with 16, a burst of
    1,000 new rollouts waited 30 s on average for a worker (swerollout_work_queue_wait_seconds)
    while no request ever waited for a slot (swerollout_api_slot_wait_seconds)."""
    status_coalesce_seconds: float = Field(default=3.0, ge=0.0)
    """Minimum interval between progress status patches of one rollout (seconds)."""
    runner_report_grace_seconds: float = Field(default=10.0, ge=0.0)
    """How long a runner told by its batch to abort or resume has to report it before its
    rollout's pass looks (writing Resuming for a silent one); a report asks for the pass
    at once. So a batch resume costs one status write per member, not two."""
    default_queue_name: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    """Kueue LocalQueue for the pods of rollouts that name none (spec.sandbox.queueName);
    unset: such pods do not use Kueue."""
    keep_failed_pods: bool = False
    """Keep the pods of Failed rollouts for debugging instead of deleting them."""

    shards: int = Field(default=0, ge=0, le=64)
    """Split the rollouts into this many shards, each owned by one replica at a time through
    a Lease (shards.py): run several replicas, each watching and answering only its own
    shards. 0: no Leases; this process handles every rollout (one replica)."""
    replica_id: str = Field(default="", max_length=200)
    """This replica's name in the shard Leases (the chart passes the pod name); empty: the
    host name and process id."""
    advertise_url: str | None = None
    """Where runners reach this replica itself (the chart: http://<pod IP>:<ingest port>): a
    replica asked for a shard it does not own answers 421 with the owner's address.
    Unset: ingest_url."""
    lease_namespace: str | None = None
    """Namespace of the shard Leases; unset: the operator's own (its ServiceAccount's)."""
