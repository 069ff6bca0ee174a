"""The one module that speaks the Kubernetes REST protocol for swerollout.

    from swerollout.kube import KubeClient, PODS
    with KubeClient.from_kubeconfig(path) as kube:
        pod = kube.get(PODS, "name", "namespace")

Objects are plain dicts as the API server sends them. Errors are one family rooted
at :class:`KubeError` with ``.status``, ``.reason``, ``.message`` and ``.retryable``.
"""

from swerollout.kube._base import PatchType, PropagationPolicy, TokenRequestResult, WatchEvent
from swerollout.kube.client import AsyncKubeClient, KubeClient
from swerollout.kube.config import (
    KubeConfig,
    kubeconfig_document,
    load_config,
    load_incluster,
    load_kubeconfig,
    write_kubeconfig,
)
from swerollout.kube.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    MethodNotAllowed,
    NotFound,
    ServerError,
    StatusCause,
    TooManyRequests,
    TransportError,
    Unauthorized,
)
from swerollout.kube.resources import (
    CLUSTERROLEBINDINGS,
    CLUSTERROLES,
    CONFIGMAPS,
    CRDS,
    DEPLOYMENTS,
    EVENTS,
    EVENTS_V1,
    LEASES,
    NAMESPACES,
    NODES,
    PERSISTENTVOLUMECLAIMS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    SWEROLLOUTS,
    ResourceType,
)
from swerollout.kube.retry import aretry, retry

__all__ = [
    "AlreadyExists", "ApiError", "AsyncKubeClient", "BadRequest", "CLUSTERROLEBINDINGS", "CLUSTERROLES",
    "CONFIGMAPS", "CRDS", "ConfigError", "Conflict", "DEPLOYMENTS", "EVENTS", "EVENTS_V1", "Forbidden", "Gone",
    "Invalid", "KubeClient", "KubeConfig", "KubeError", "LEASES", "MethodNotAllowed", "NAMESPACES", "NODES",
    "NotFound", "PERSISTENTVOLUMECLAIMS", "PODS", "PatchType", "PropagationPolicy", "ROLEBINDINGS", "ROLES",
    "ResourceType", "SECRETS", "SERVICEACCOUNTS", "SERVICES", "SWEROLLOUTS", "ServerError", "StatusCause",
    "TokenRequestResult", "TooManyRequests", "TransportError", "Unauthorized", "WatchEvent", "aretry",
    "kubeconfig_document", "load_config", "load_incluster", "load_kubeconfig", "retry", "write_kubeconfig",
]
