"""The rollout pod and its Secret, as pure functions of the SWERollout and the settings.

Names are deterministic (rollout name + attempt) so that an operator restart at
any point finds what it created instead of creating it again.

Pod shape:
- init `swerex-bundle`: copies a portable Python + swe-rex bundle from the runner
  image into an emptyDir, so the sandbox can run swerex-remote in any task image
  whatever its libc or Python.
- `sandbox`: the task image; serves swerex-remote on loopback. It sees only the
  swerex token, never the ingest token.
- `runner`: our image; the agent loop. The only container with the ingest token.
No Kubernetes credentials are mounted anywhere; no shared process namespace.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlsplit

from swerollout.api import v1alpha1 as api
from swerollout.api.labels import rollout_label
from swerollout.api.shards import LABEL_SHARD
from swerollout.wire.runner_env import RunnerEnv, RunnerRole

from .settings import OperatorSettings

SECRET_INGEST_KEY = "ingest-token"
SECRET_SWEREX_KEY = "swerex-token"
SANDBOX_DROPPED_CAPABILITIES = (
    "NET_RAW",
    "MKNOD",
    "SYS_CHROOT",
    "SETFCAP",
    "SETPCAP",
    "AUDIT_WRITE",
    "NET_BIND_SERVICE",
)
BUNDLE_MOUNT = "/swerex"
RUNNER_TMP_DIR = "/var/tmp/swerollout"
RUNNER_SECRET_DIR = "/var/run/secrets/swerollout"
INFERENCE_KEYS_DIR = "/var/run/secrets/swerollout-inference"
INFERENCE_KEY_FILE = "key"
SANDBOX_CONTAINER = "sandbox"
RUNNER_CONTAINER = "runner"
BUNDLE_CONTAINER = "swerex-bundle"
MAX_POD_NAME = 63


def _bounded(name: str, suffix: str, limit: int = MAX_POD_NAME) -> str:
    """`name-suffix`, shortened with a hash when too long (still deterministic)."""
    full = f"{name}-{suffix}"
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = limit - len(suffix) - len(digest) - 2
    return f"{name[:keep].rstrip('-.')}-{digest}-{suffix}"


def rollout_pod_name(rollout_name: str, attempt: int) -> str:
    return _bounded(rollout_name, f"a{attempt}")


def eval_pod_name(rollout_name: str, attempt: int) -> str:
    return _bounded(rollout_name, f"eval{attempt}")


def secret_name(rollout_name: str) -> str:
    return _bounded(rollout_name, "runner", limit=253)


def owner_reference(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def image_label(image: str) -> str:
    """The value of LABEL_IMAGE: a label value cannot hold an image reference."""
    return hashlib.sha256(image.encode()).hexdigest()[:16]


def _labels(meta: dict[str, Any], component: str) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "swerollout",
        "app.kubernetes.io/managed-by": "swerollout-operator",
        api.LABEL_ROLLOUT: rollout_label(meta["name"]),
        api.LABEL_COMPONENT: component,
    }
    # The shard label too: a sharded replica's pod watch selects by it.
    for key in (api.LABEL_BATCH, api.LABEL_MEMBER, LABEL_SHARD):
        value = (meta.get("labels") or {}).get(key)
        if value:
            labels[key] = value
    return labels


def runner_secret(meta: dict[str, Any], ingest_token: str, swerex_token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": _labels(meta, "runner-secret"),
            "ownerReferences": [owner_reference(meta)],
        },
        "type": "Opaque",
        "stringData": {SECRET_INGEST_KEY: ingest_token, SECRET_SWEREX_KEY: swerex_token},
    }


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _egress(rollout: api.SWERollout, settings: OperatorSettings, role: str) -> str:
    """What the runner must reach: the ingest API, and the policy server when it generates."""
    needed = [_host_port(settings.ingest_url)]
    if role == "rollout":
        needed.append(_host_port(str(rollout.spec.inference.endpoint)))
    return ",".join(dict.fromkeys(needed))


def _inference_keys(spec: api.SWERolloutSpec) -> dict[str, api.SecretKeyRef]:
    """The user's Secrets holding the inference server's keys, by what they are."""
    refs = {"api": spec.inference.api_key_secret_ref, "admin": spec.inference.admin_key_secret_ref}
    return {kind: ref for kind, ref in refs.items() if ref is not None}


def _inference_key_volumes(keys: dict[str, api.SecretKeyRef]) -> list[dict[str, Any]]:
    # The kubelet reads these Secrets for the pod: the operator never needs to.
    return [
        {
            "name": f"inference-{kind}-key",
            "secret": {
                "secretName": ref.name,
                "defaultMode": 0o440,
                "items": [{"key": ref.key, "path": INFERENCE_KEY_FILE}],
            },
        }
        for kind, ref in keys.items()
    ]


def _resources(res: api.Resources | None) -> dict[str, Any]:
    if res is None:
        return {}
    out: dict[str, Any] = {}
    if res.requests:
        out["requests"] = dict(res.requests)
    if res.limits:
        out["limits"] = dict(res.limits)
    return out


def _bundle_resources(settings: OperatorSettings) -> dict[str, Any]:
    # A pod is scheduled on the larger of its biggest init container's request and its
    # containers' sum, so the copy asks for the runner's CPU, which it runs before: a fixed
    # figure above small sandboxes' set every pod's floor (a prepared batch's parked pods
    # and their prewarmed eval pods did not fit on a node their own requests fit on).
    requests: dict[str, str] = {"memory": "64Mi"}
    if cpu := settings.runner_resources.get("requests", {}).get("cpu"):
        requests["cpu"] = cpu
    return {"requests": requests, "limits": {"memory": "256Mi"}}


def rollout_pod(
    rollout: api.SWERollout,
    meta: dict[str, Any],
    settings: OperatorSettings,
    *,
    attempt: int,
    role: str = "rollout",
) -> dict[str, Any]:
    """The pod for one attempt. `role` is `rollout` (policy sandbox) or `eval` (grading)."""
    spec = rollout.spec
    name = rollout_pod_name(meta["name"], attempt) if role == "rollout" else eval_pod_name(meta["name"], attempt)
    sandbox_resources = spec.sandbox.resources
    if role == "eval" and spec.reward.resources is not None:
        sandbox_resources = spec.reward.resources
    secret = secret_name(meta["name"])
    swerex_url = f"http://127.0.0.1:{settings.sandbox_port}"
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    tolerations = [t.to_wire() for t in spec.sandbox.tolerations] + list(settings.extra_tolerations)
    # Only the runner of a rollout pod talks to the inference server; the eval pod and
    # the sandbox container (model-written code) never see its keys.
    inference_keys = _inference_keys(spec) if role == "rollout" else {}
    key_file = {kind: f"{INFERENCE_KEYS_DIR}/{kind}/{INFERENCE_KEY_FILE}" for kind in inference_keys}
    node_selector = {**settings.extra_node_selector, **spec.sandbox.node_selector}

    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": False,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": settings.pod_active_deadline_seconds,
        "terminationGracePeriodSeconds": 10,
        # fsGroup: Secret files are root-owned (mode 0440); the group lets the runner
        # (uid 10001) read its credentials under a real kubelet.
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 10001},
        "volumes": [
            {"name": "swerex-bundle", "emptyDir": {}},
            # The runner's root filesystem is read-only and grading writes a temp file:
            # a scratch dir named by TMPDIR (not mounted over /tmp, which the local node
            # agent replaces with a private /tmp of its own).
            {"name": "runner-tmp", "emptyDir": {}},
            {
                # Only the swerex key: the sandbox must never see the ingest token.
                "name": "sandbox-credentials",
                "secret": {
                    "secretName": secret,
                    "defaultMode": 0o440,
                    "items": [{"key": SECRET_SWEREX_KEY, "path": SECRET_SWEREX_KEY}],
                },
            },
            {
                "name": "runner-credentials",
                "secret": {"secretName": secret, "defaultMode": 0o440},
            },
            *_inference_key_volumes(inference_keys),
        ],
        "initContainers": [
            {
                "name": BUNDLE_CONTAINER,
                "image": settings.runner_image,
                "imagePullPolicy": settings.runner_image_pull_policy,
                "command": ["swerollout", "sandbox-bundle", "install", "--dest", BUNDLE_MOUNT],
                "volumeMounts": [{"name": "swerex-bundle", "mountPath": BUNDLE_MOUNT}],
                "resources": _bundle_resources(settings),
                "securityContext": {
                    **restricted,
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "readOnlyRootFilesystem": True,
                },
            }
        ],
        "containers": [
            {
                "name": SANDBOX_CONTAINER,
                "image": spec.instance.image,
                # Task images are immutable per task, and SWE-bench tags them :latest (whose
                # default is Always): pulled once per node, then every member uses the copy.
                "imagePullPolicy": "IfNotPresent",
                "command": [f"{BUNDLE_MOUNT}/bin/swerex-serve"],
                "workingDir": spec.instance.workdir,
                "env": [
                    {"name": "SWEREX_PORT", "value": str(settings.sandbox_port)},
                    {"name": "SWEREX_AUTH_TOKEN_FILE", "value": f"{RUNNER_SECRET_DIR}/{SECRET_SWEREX_KEY}"},
                    # The embedded dev mode checks a file:// task image out at this commit.
                    {"name": "SWEROLLOUT_BASE_COMMIT", "value": spec.instance.base_commit},
                ],
                "volumeMounts": [
                    {"name": "swerex-bundle", "mountPath": BUNDLE_MOUNT, "readOnly": True},
                    {"name": "sandbox-credentials", "mountPath": RUNNER_SECRET_DIR, "readOnly": True},
                ],
                # An exec probe: swerex listens on loopback only, and a tcpSocket probe
                # would dial the pod IP.
                "readinessProbe": {
                    "exec": {"command": [f"{BUNDLE_MOUNT}/bin/swerex-serve", "--probe"]},
                    "periodSeconds": 2,
                    "timeoutSeconds": 5,
                    "failureThreshold": 3,
                },
                # Declared so the embedded node agent links the runner to it (its sandbox
                # containers have a network namespace of their own).
                "ports": [{"name": "swerex", "containerPort": settings.sandbox_port, "protocol": "TCP"}],
                "resources": _resources(sandbox_resources),
                # Task images may need root (chown, apt in tests), so the default set stays
                # minus what a test suite never needs: raw sockets, device nodes, chroot,
                # file capabilities, audit, privileged ports.
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "capabilities": {"drop": list(SANDBOX_DROPPED_CAPABILITIES)},
                },
            },
            {
                "name": RUNNER_CONTAINER,
                "image": settings.runner_image,
                "imagePullPolicy": settings.runner_image_pull_policy,
                "command": ["python", "-m", "agent_runner"],
                "env": RunnerEnv(
                    role=RunnerRole(role),
                    ingest_url=settings.ingest_url,
                    namespace=meta["namespace"],
                    name=meta["name"],
                    uid=meta["uid"],
                    attempt=attempt,
                    ingest_token_file=f"{RUNNER_SECRET_DIR}/{SECRET_INGEST_KEY}",
                    swerex_url=swerex_url,
                    swerex_token_file=f"{RUNNER_SECRET_DIR}/{SECRET_SWEREX_KEY}",
                    inference_api_key_file=key_file.get("api"),
                    inference_admin_key_file=key_file.get("admin"),
                    # Loaded while the sandbox starts (agent_runner/pod/startup.py); the eval runner needs none.
                    tokenizer=spec.inference.tokenizer if role == "rollout" else None,
                ).to_env()
                + [
                    {"name": "TMPDIR", "value": RUNNER_TMP_DIR},
                    # The image user's home is on the read-only root; caches go to scratch.
                    {"name": "HOME", "value": RUNNER_TMP_DIR},
                ],
                "volumeMounts": [
                    {"name": "runner-credentials", "mountPath": RUNNER_SECRET_DIR, "readOnly": True},
                    {"name": "runner-tmp", "mountPath": RUNNER_TMP_DIR},
                    *(
                        {"name": f"inference-{kind}-key", "mountPath": f"{INFERENCE_KEYS_DIR}/{kind}", "readOnly": True}
                        for kind in inference_keys
                    ),
                ],
                "resources": settings.runner_resources,
                "securityContext": {
                    **restricted,
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "readOnlyRootFilesystem": True,
                },
            },
        ],
    }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if spec.sandbox.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.sandbox.runtime_class_name
    if spec.sandbox.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.sandbox.image_pull_secrets]
    # A GRPO group's members (and every rollout of the same task) prefer a node that runs a
    # pod of their image already: it holds the image (the scheduler's ImageLocality scores
    # that too, but only for images it has seen in a node's status, after the first pull).
    pod_spec["affinity"] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {api.LABEL_IMAGE: image_label(spec.instance.image)}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }

    queue_labels, queue_annotations = kueue_metadata(spec, meta, settings, role=role, attempt=attempt)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {**_labels(meta, role), api.LABEL_IMAGE: image_label(spec.instance.image), **queue_labels},
            "annotations": {
                "swerollout.io/attempt": str(attempt),
                api.ANNOTATION_EGRESS: _egress(rollout, settings, role),
                **queue_annotations,
            },
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": pod_spec,
    }


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_GROUP_RETRIABLE = "kueue.x-k8s.io/retriable-in-group"


def pod_group(meta: dict[str, Any]) -> tuple[str, int] | None:
    """The rollout's GRPO group as a Kueue pod group: (name, members), from the labels the
    client's submit_batch sets (batch, sample, group size); None for a rollout made otherwise."""
    labels = meta.get("labels") or {}
    batch, sample, size = labels.get(api.LABEL_BATCH), labels.get(api.LABEL_SAMPLE), labels.get(api.LABEL_GROUP_SIZE)
    if not (batch and sample and size and size.isdigit() and int(size) >= 1):
        return None
    return rollout_label(f"{batch}-{sample}"), int(size)


def kueue_metadata(
    spec: api.SWERolloutSpec, meta: dict[str, Any], settings: OperatorSettings, *, role: str, attempt: int
) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations that put the pod into Kueue's plain-Pod integration, if a queue
    is named (spec.sandbox.queueName, else --default-queue-name).

    The first pods of a GRPO group are one pod group: Kueue admits all of them or none, so a
    half-admitted group never holds capacity a whole one could use. Its pods are not
    retriable in the group: a member's pod ends when the operator deletes it (it never
    succeeds on its own), and Kueue must not wait for a replacement. So the group's workload
    holds its quota until every member's pod has ended, an aborted member's kept-alive pod
    included, then finishes and Kueue lets the pods go. (A serving group would never finish,
    and Kueue keeps its finalizer on the ended pods of a plain serving group.) Eval pods and
    replay pods (attempt 2+, after a lost pod) are workloads of their own: a lone pod cannot
    join a group that was admitted whole and has since let go of pods."""
    queue = spec.sandbox.queue_name or settings.default_queue_name
    if not queue:
        return {}, {}
    labels = {KUEUE_QUEUE_LABEL: queue}
    annotations: dict[str, str] = {}
    group = pod_group(meta) if role == "rollout" and attempt == 1 else None
    if group is not None:
        labels[KUEUE_GROUP_LABEL] = group[0]
        annotations[KUEUE_GROUP_COUNT] = str(group[1])
        annotations[KUEUE_GROUP_RETRIABLE] = "false"
    return labels, annotations
