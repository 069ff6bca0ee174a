"""Turning an operation into an HTTP request and an HTTP answer into a result or a
:class:`KubeError`: the client's logic apart from its I/O (none happens here), so it can be
read and unit-tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from swerollout.kube.config import ConfiguredClient
from swerollout.kube.errors import KubeError, TransportError, error_from_response, error_from_status
from swerollout.kube.resources import PODS, SERVICEACCOUNTS, SUBJECTACCESSREVIEWS, TOKENREVIEWS, ResourceType

PatchType = Literal["merge", "strategic", "json", "apply"]
PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    # Server-side apply takes YAML; JSON is valid YAML, so we send JSON.
    "apply": "application/apply-patch+yaml",
}
PropagationPolicy = Literal["Foreground", "Background", "Orphan"]
Object = dict[str, Any]

USER_AGENT = "swerollout-kube/0.1"


class WatchEvent(BaseModel):
    """One line of a watch stream."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: Object
    """The object after the change (for DELETED: its last state; for BOOKMARK: only
    metadata.resourceVersion is meaningful)."""

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))

    @property
    def initial_events_end(self) -> bool:
        """True for the BOOKMARK that ends the initial state of a
        ``send_initial_events`` watch (everything before it is the current state)."""
        annotations = self.object.get("metadata", {}).get("annotations") or {}
        return self.type == "BOOKMARK" and annotations.get("k8s.io/initial-events-end") == "true"


class TokenRequestResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str
    expiration_timestamp: str
    """RFC 3339 time the token stops working."""


@dataclass
class RequestSpec:
    """One HTTP request, ready for a transport."""

    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str | None = None


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _namespace_of(body: Object, namespace: str | None) -> str | None:
    if namespace is not None:
        return namespace
    ns = (body.get("metadata") or {}).get("namespace")
    return str(ns) if ns else None


def _name_of(body: Object) -> str:
    name = (body.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("the object has no metadata.name")
    return str(name)


class BaseKubeClient(ConfiguredClient):
    """Request building and answer parsing of AsyncKubeClient (which does the I/O)."""

    # --- headers and answers -------------------------------------------------------

    def _headers(self, spec: RequestSpec) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        token = self.config.bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if spec.content_type:
            headers["Content-Type"] = spec.content_type
        return headers

    @staticmethod
    def _decode(status: int, content: bytes) -> Object:
        if status >= 400:
            raise error_from_response(status, content)
        if not content:
            return {}
        try:
            value = json.loads(content)
        except ValueError as exc:
            raise KubeError(f"the API server sent a non-JSON answer: {content[:200]!r}", status=status) from exc
        return value if isinstance(value, dict) else {"value": value}

    @staticmethod
    def _decode_watch_line(line: str) -> WatchEvent | None:
        line = line.strip()
        if not line:
            return None
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise TransportError(f"the watch stream broke mid-line: {line[:200]!r}") from exc
        if raw.get("type") == "ERROR":
            status = raw.get("object") or {}
            raise error_from_status(int(status.get("code") or 500), status)
        return WatchEvent(type=raw["type"], object=raw.get("object") or {})

    # --- request builders ----------------------------------------------------------

    @staticmethod
    def _req_raw(method: str, path: str, params: dict[str, str] | None, body: Any) -> RequestSpec:
        if body is None:
            return RequestSpec(method, path, params or {})
        return RequestSpec(method, path, params or {}, _dump(body), "application/json")

    @staticmethod
    def _req_get(rt: ResourceType, name: str, namespace: str | None, subresource: str | None) -> RequestSpec:
        return RequestSpec("GET", rt.path(namespace, name, subresource))

    @staticmethod
    def _req_list(
        rt: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
        continue_token: str | None,
        resource_version: str | None,
    ) -> RequestSpec:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        return RequestSpec("GET", rt.path(namespace), params)

    @staticmethod
    def _write_params(field_manager: str | None, dry_run: bool) -> dict[str, str]:
        params: dict[str, str] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if dry_run:
            params["dryRun"] = "All"
        return params

    def _req_create(
        self,
        rt: ResourceType,
        body: Object,
        namespace: str | None,
        subresource: str | None,
        name: str | None,
        field_manager: str | None,
        dry_run: bool,
    ) -> RequestSpec:
        ns = _namespace_of(body, namespace) if rt.namespaced else None
        if rt.namespaced and ns is None:
            raise ValueError(f"creating {rt.plural} needs a namespace (argument or metadata.namespace)")
        path = rt.path(ns, name, subresource) if subresource else rt.path(ns)
        return RequestSpec("POST", path, self._write_params(field_manager, dry_run), _dump(body), "application/json")

    def _req_replace(
        self,
        rt: ResourceType,
        body: Object,
        namespace: str | None,
        subresource: str | None,
        field_manager: str | None,
        dry_run: bool,
    ) -> RequestSpec:
        ns = _namespace_of(body, namespace) if rt.namespaced else None
        return RequestSpec(
            "PUT",
            rt.path(ns, _name_of(body), subresource),
            self._write_params(field_manager, dry_run),
            _dump(body),
            "application/json",
        )

    def _req_patch(
        self,
        rt: ResourceType,
        name: str,
        patch: Object | list[Object],
        namespace: str | None,
        patch_type: PatchType,
        subresource: str | None,
        field_manager: str | None,
        force: bool,
        dry_run: bool,
    ) -> RequestSpec:
        if patch_type not in PATCH_CONTENT_TYPES:
            raise ValueError(f"patch_type must be one of {sorted(PATCH_CONTENT_TYPES)}, not {patch_type!r}")
        if patch_type == "json" and not isinstance(patch, list):
            raise ValueError("a JSON patch (patch_type='json') is a list of operations")
        params = self._write_params(field_manager, dry_run)
        if patch_type == "apply":
            if not field_manager:
                raise ValueError("server-side apply needs field_manager= (who owns the fields)")
            if force:
                params["force"] = "true"
        return RequestSpec(
            "PATCH", rt.path(namespace, name, subresource), params, _dump(patch), PATCH_CONTENT_TYPES[patch_type]
        )

    @staticmethod
    def _req_delete(
        rt: ResourceType,
        name: str,
        namespace: str | None,
        propagation_policy: PropagationPolicy | None,
        grace_period_seconds: int | None,
        uid: str | None,
        resource_version: str | None,
        dry_run: bool,
    ) -> RequestSpec:
        options: Object = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        if dry_run:
            options["dryRun"] = ["All"]
        return RequestSpec("DELETE", rt.path(namespace, name), {}, _dump(options), "application/json")

    @staticmethod
    def _req_delete_collection(
        rt: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        grace_period_seconds: int | None,
        propagation_policy: PropagationPolicy | None,
    ) -> RequestSpec:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        options: Object = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return RequestSpec("DELETE", rt.path(namespace), params, _dump(options), "application/json")

    @staticmethod
    def _req_watch(
        rt: ResourceType,
        namespace: str | None,
        resource_version: str | None,
        label_selector: str | None,
        field_selector: str | None,
        allow_bookmarks: bool,
        timeout_seconds: int | None,
        send_initial_events: bool,
    ) -> RequestSpec:
        params = {"watch": "true"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
        if send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        return RequestSpec("GET", rt.path(namespace), params)

    # --- special-purpose APIs --------------------------------------------------------

    def _req_token(
        self, namespace: str, service_account: str, audiences: list[str] | None, expiration_seconds: int
    ) -> RequestSpec:
        spec: Object = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        return self._req_create(SERVICEACCOUNTS, body, namespace, "token", service_account, None, False)

    @staticmethod
    def _token_result(answer: Object) -> TokenRequestResult:
        status = answer.get("status") or {}
        return TokenRequestResult(
            token=str(status.get("token", "")), expiration_timestamp=str(status.get("expirationTimestamp", ""))
        )

    def _req_token_review(self, token: str, audiences: list[str] | None) -> RequestSpec:
        spec: Object = {"token": token}
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        return self._req_create(TOKENREVIEWS, body, None, None, None, None, False)

    def _req_access_review(
        self,
        user: str,
        groups: list[str] | None,
        verb: str,
        resource: str,
        namespace: str | None,
        group: str,
        subresource: str | None,
        name: str | None,
    ) -> RequestSpec:
        attributes: Object = {"verb": verb, "resource": resource, "group": group}
        for key, value in (("namespace", namespace), ("subresource", subresource), ("name", name)):
            if value:
                attributes[key] = value
        spec: Object = {"user": user, "resourceAttributes": attributes}
        if groups:
            spec["groups"] = groups
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return self._req_create(SUBJECTACCESSREVIEWS, body, None, None, None, None, False)

    def _req_bind(self, namespace: str, pod: str, node: str, pod_uid: str | None) -> RequestSpec:
        meta: Object = {"name": pod, "namespace": namespace}
        if pod_uid:
            meta["uid"] = pod_uid
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node}}
        return self._req_create(PODS, body, namespace, "binding", pod, None, False)
