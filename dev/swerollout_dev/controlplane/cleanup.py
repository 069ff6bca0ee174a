"""Emptying a namespace without a controller-manager.

Deleting a namespace only marks it Terminating: the namespace controller, which
would delete its contents and then the namespace, does not run here. So we delete
the contents ourselves: every common type plus every installed custom resource,
with grace period 0 (no kubelet will confirm a graceful pod deletion) and with
finalizers stripped (no operator may be left to remove them).
"""

from __future__ import annotations

from swerollout.kube import (
    CONFIGMAPS,
    CRDS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    NAMESPACES,
    PERSISTENTVOLUMECLAIMS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    KubeClient,
    KubeError,
    NotFound,
    ResourceType,
)

COMMON_NAMESPACED_TYPES = (
    PODS,
    SECRETS,
    CONFIGMAPS,
    SERVICEACCOUNTS,
    EVENTS,
    ROLES,
    ROLEBINDINGS,
    LEASES,
    PERSISTENTVOLUMECLAIMS,
    DEPLOYMENTS,
)


def custom_resource_types(kube: KubeClient) -> list[ResourceType]:
    """Every namespaced custom resource type installed (its storage version)."""
    found = []
    for crd in kube.iter_items(CRDS):
        spec = crd.get("spec") or {}
        if spec.get("scope") != "Namespaced":
            continue
        versions = [v for v in spec.get("versions") or [] if v.get("served")]
        storage = next((v for v in versions if v.get("storage")), versions[0] if versions else None)
        if storage is None:
            continue
        found.append(ResourceType(f"{spec['group']}/{storage['name']}", spec["names"]["plural"]))
    return found


def purge_namespace(kube: KubeClient, namespace: str, *, delete_namespace: bool = True) -> None:
    """Delete everything in ``namespace`` (then the namespace, which stays Terminating)."""
    types = [*custom_resource_types(kube), *COMMON_NAMESPACED_TYPES, SERVICES]
    for rt in types:
        try:
            kube.delete_collection(rt, namespace, grace_period_seconds=0)
        except KubeError:
            pass  # e.g. no deletecollection verb (Services): the loop below deletes one by one
        try:
            for item in kube.iter_items(rt, namespace):
                name = item["metadata"]["name"]
                if item["metadata"].get("finalizers"):
                    kube.patch(rt, name, {"metadata": {"finalizers": None}}, namespace)
                try:
                    kube.delete(rt, name, namespace, grace_period_seconds=0)
                except NotFound:
                    pass
        except NotFound:
            continue  # type not served (e.g. a CRD removed meanwhile)
        except KubeError:
            continue  # best effort: one stubborn type must not keep the rest alive
    if delete_namespace:
        try:
            kube.delete(NAMESPACES, namespace)
        except NotFound:
            pass
