"""The one module that speaks the Kubernetes REST protocol for swerollout.

    from swerollout.kube import KubeClient, PODS
    with KubeClient.from_kubeconfig(path) as kube:
        pod = kube.get(PODS, "name", "namespace")

Objects are plain dicts as the API server sends them. A type is addressed by
``ResourceType(apiVersion, plural, namespaced)``; constants cover the usual ones.

One implementation, :class:`AsyncKubeClient`; :class:`KubeClient` is the same client
behind a portal thread (blocking, thread-safe), so every operation has the same name,
arguments and errors on both, awaited on one. Operations: get, list (one page;
``continue_token``), iter_items (all pages), create, replace, patch (``patch_type``
merge | strategic | json | apply), apply (server-side apply, ``field_manager``,
``force``), delete (``propagation_policy``, ``grace_period_seconds``, ``uid`` /
``resource_version`` preconditions), delete_collection, watch (``resource_version``,
bookmarks, ``send_initial_events``), get_status / patch_status / replace_status,
bind_pod, request_token (TokenRequest), token_review, subject_access_review, and
``request`` for any other path.

Errors are one family rooted at :class:`KubeError` with ``.status``, ``.reason``,
``.message``, ``.causes`` (field errors of a 422) and ``.retryable``:

====  ===================  =========
 400  BadRequest           no
 401  Unauthorized         no
 403  Forbidden            no
 404  NotFound             no
 409  Conflict             no (re-read, then retry yourself)
 409  AlreadyExists        no (a Conflict subclass)
 410  Gone                 no (relist, then watch again)
 422  Invalid              no
 429  TooManyRequests      yes (``retry_after_seconds``)
 5xx  ServerError          yes
  -   TransportError       yes (no answer at all)
  -   ConfigError          no (kubeconfig / in-cluster files)
====  ===================  =========

:func:`retry` / :func:`aretry` retry the retryable ones a bounded number of times.
"""

from swerollout.kube._base import PatchType, PropagationPolicy, TokenRequestResult, WatchEvent
from swerollout.kube.client import AsyncKubeClient, is_urgent, urgent
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
    SWEROLLOUTBATCHES,
    SWEROLLOUTS,
    ResourceType,
)
from swerollout.kube.retry import aretry
from swerollout.kube.sync import KubeClient

__all__ = [
    "AlreadyExists",
    "ApiError",
    "AsyncKubeClient",
    "BadRequest",
    "CLUSTERROLEBINDINGS",
    "CLUSTERROLES",
    "CONFIGMAPS",
    "CRDS",
    "ConfigError",
    "Conflict",
    "DEPLOYMENTS",
    "EVENTS",
    "EVENTS_V1",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeClient",
    "KubeConfig",
    "KubeError",
    "LEASES",
    "MethodNotAllowed",
    "NAMESPACES",
    "NODES",
    "NotFound",
    "PERSISTENTVOLUMECLAIMS",
    "PODS",
    "PatchType",
    "PropagationPolicy",
    "ROLEBINDINGS",
    "ROLES",
    "ResourceType",
    "SECRETS",
    "SERVICEACCOUNTS",
    "SERVICES",
    "SWEROLLOUTBATCHES",
    "SWEROLLOUTS",
    "ServerError",
    "StatusCause",
    "TokenRequestResult",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "WatchEvent",
    "aretry",
    "is_urgent",
    "kubeconfig_document",
    "load_config",
    "load_incluster",
    "load_kubeconfig",
    "urgent",
    "write_kubeconfig",
]
