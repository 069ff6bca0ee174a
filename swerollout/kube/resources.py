"""Addressing: (apiVersion, plural, namespace, name) -> URL path.

A :class:`ResourceType` names a kind by its apiVersion and plural resource name,
the way the REST API does; no discovery round trip is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class ResourceType:
    api_version: str
    """``v1`` for the core group, else ``group/version`` (``swerollout.io/v1alpha1``)."""
    plural: str
    """The lowercase plural resource name used in URLs (``pods``, ``swerollouts``)."""
    namespaced: bool = True
    """False for cluster-scoped kinds (namespaces, nodes, CRDs, ClusterRoles)."""

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """URL path of the collection (no name) or of one object (and its subresource).

        ``namespace=None`` on a namespaced type addresses all namespaces (list/watch).
        """
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if not self.namespaced and namespace:
            raise ValueError(f"{self.plural} is cluster-scoped; do not pass a namespace")
        if self.namespaced and namespace is None and name is not None:
            raise ValueError(f"{self.plural} is namespaced; pass namespace= to address {name!r}")
        parts = [prefix]
        if namespace:
            parts += ["namespaces", quote(namespace, safe="")]
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError(f"empty object name for {self.plural}")
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return "/".join(parts)


# Well-known types this project touches; anything else is one ResourceType(...) away.
PODS = ResourceType("v1", "pods")
SECRETS = ResourceType("v1", "secrets")
CONFIGMAPS = ResourceType("v1", "configmaps")
SERVICES = ResourceType("v1", "services")
SERVICEACCOUNTS = ResourceType("v1", "serviceaccounts")
EVENTS = ResourceType("v1", "events")
PERSISTENTVOLUMECLAIMS = ResourceType("v1", "persistentvolumeclaims")
NAMESPACES = ResourceType("v1", "namespaces", namespaced=False)
NODES = ResourceType("v1", "nodes", namespaced=False)
EVENTS_V1 = ResourceType("events.k8s.io/v1", "events")
LEASES = ResourceType("coordination.k8s.io/v1", "leases")
ROLES = ResourceType("rbac.authorization.k8s.io/v1", "roles")
ROLEBINDINGS = ResourceType("rbac.authorization.k8s.io/v1", "rolebindings")
CLUSTERROLES = ResourceType("rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False)
CLUSTERROLEBINDINGS = ResourceType("rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False)
CRDS = ResourceType("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
DEPLOYMENTS = ResourceType("apps/v1", "deployments")
TOKENREVIEWS = ResourceType("authentication.k8s.io/v1", "tokenreviews", namespaced=False)
SUBJECTACCESSREVIEWS = ResourceType("authorization.k8s.io/v1", "subjectaccessreviews", namespaced=False)
SELFSUBJECTACCESSREVIEWS = ResourceType("authorization.k8s.io/v1", "selfsubjectaccessreviews", namespaced=False)
SWEROLLOUTS = ResourceType("swerollout.io/v1alpha1", "swerollouts")
SWEROLLOUTBATCHES = ResourceType("swerollout.io/v1alpha1", "swerolloutbatches")
