"""The Kubernetes client against the real API server: CRUD, apply, patches,
conflicts, watch, subresources, error mapping, and config loading."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from swerollout.backoff import Backoff
from swerollout.kube import (
    CONFIGMAPS,
    CRDS,
    PODS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    AlreadyExists,
    AsyncKubeClient,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeClient,
    KubeConfig,
    NotFound,
    ResourceType,
    ServerError,
    TransportError,
    WatchEvent,
    aretry,
    load_incluster,
    load_kubeconfig,
    urgent,
)
from swerollout.kube._base import RequestSpec
from swerollout_dev.controlplane import ControlPlane, free_port

WIDGETS = ResourceType("test.swerollout.io/v1", "widgets")

FAST = Backoff(first_seconds=0.001, attempts=5)


def configmap(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


@pytest.fixture(scope="module")
def widgets_crd(control_plane: ControlPlane) -> Iterator[ResourceType]:
    """A small namespaced CRD with a status subresource and a validated field."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.swerollout.io"},
        "spec": {
            "group": "test.swerollout.io",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                },
                                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                            },
                        }
                    },
                }
            ],
        },
    }
    with control_plane.admin_client() as kube:
        try:
            kube.create(CRDS, crd)
        except AlreadyExists:
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conditions = (kube.get(CRDS, "widgets.test.swerollout.io").get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the test CRD never became Established")
    yield WIDGETS


def widget(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "test.swerollout.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}}


# --- CRUD, list, patch flavours -------------------------------------------------------


def test_crud_on_a_core_resource(kube: KubeClient, namespace: str) -> None:
    created = kube.create(CONFIGMAPS, configmap("one", {"a": "1"}), namespace)
    assert created["metadata"]["uid"]
    assert kube.get(CONFIGMAPS, "one", namespace)["data"] == {"a": "1"}

    created["data"]["b"] = "2"
    replaced = kube.replace(CONFIGMAPS, created, namespace)
    assert replaced["data"] == {"a": "1", "b": "2"}
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]

    merged = kube.patch(CONFIGMAPS, "one", {"data": {"a": None, "c": "3"}}, namespace)
    assert merged["data"] == {"b": "2", "c": "3"}
    strategic = kube.patch(CONFIGMAPS, "one", {"metadata": {"labels": {"k": "v"}}}, namespace, patch_type="strategic")
    assert strategic["metadata"]["labels"] == {"k": "v"}
    jsonpatched = kube.patch(
        CONFIGMAPS, "one", [{"op": "replace", "path": "/data/b", "value": "20"}], namespace, patch_type="json"
    )
    assert jsonpatched["data"]["b"] == "20"

    kube.delete(CONFIGMAPS, "one", namespace)
    with pytest.raises(NotFound):
        kube.get(CONFIGMAPS, "one", namespace)


def test_list_with_label_selector_and_pagination(kube: KubeClient, namespace: str) -> None:
    for i in range(5):
        kube.create(CONFIGMAPS, configmap(f"cm-{i}", labels={"parity": "even" if i % 2 == 0 else "odd"}), namespace)
    even = kube.list(CONFIGMAPS, namespace, label_selector="parity=even")
    assert sorted(i["metadata"]["name"] for i in even["items"]) == ["cm-0", "cm-2", "cm-4"]

    first = kube.list(CONFIGMAPS, namespace, label_selector="parity", limit=2)
    assert len(first["items"]) == 2
    assert first["metadata"].get("continue")
    everything = list(kube.iter_items(CONFIGMAPS, namespace, label_selector="parity", page_size=2))
    assert sorted(i["metadata"]["name"] for i in everything) == [f"cm-{i}" for i in range(5)]


def test_server_side_apply_owns_fields_and_conflicts_without_force(kube: KubeClient, namespace: str) -> None:
    applied = kube.apply(CONFIGMAPS, configmap("ssa", {"owner": "alice"}), namespace, field_manager="alice")
    assert applied["data"] == {"owner": "alice"}
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert "alice" in managers

    with pytest.raises(Conflict) as caught:
        kube.apply(CONFIGMAPS, configmap("ssa", {"owner": "bob"}), namespace, field_manager="bob", force=False)
    assert caught.value.status == 409
    assert "alice" in caught.value.message

    forced = kube.apply(CONFIGMAPS, configmap("ssa", {"owner": "bob"}), namespace, field_manager="bob", force=True)
    assert forced["data"] == {"owner": "bob"}
    # Apply again by alice without the field: alice no longer owns it, so bob's value stays.
    kube.apply(CONFIGMAPS, configmap("ssa", {}), namespace, field_manager="alice", force=False)
    assert kube.get(CONFIGMAPS, "ssa", namespace)["data"] == {"owner": "bob"}


def test_stale_resource_version_conflicts(kube: KubeClient, namespace: str) -> None:
    stale = kube.create(CONFIGMAPS, configmap("rv", {"n": "0"}), namespace)
    kube.patch(CONFIGMAPS, "rv", {"data": {"n": "1"}}, namespace)
    stale["data"]["n"] = "stale"
    with pytest.raises(Conflict) as caught:
        kube.replace(CONFIGMAPS, stale, namespace)
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    assert not caught.value.retryable
    assert kube.get(CONFIGMAPS, "rv", namespace)["data"] == {"n": "1"}


def test_delete_precondition_on_uid(kube: KubeClient, namespace: str) -> None:
    obj = kube.create(CONFIGMAPS, configmap("pre"), namespace)
    with pytest.raises(Conflict):
        kube.delete(CONFIGMAPS, "pre", namespace, uid="00000000-0000-0000-0000-000000000000")
    kube.delete(CONFIGMAPS, "pre", namespace, uid=obj["metadata"]["uid"], propagation_policy="Background")
    with pytest.raises(NotFound):
        kube.get(CONFIGMAPS, "pre", namespace)


# --- errors ----------------------------------------------------------------------------


def test_error_mapping_404_409_422(kube: KubeClient, namespace: str) -> None:
    with pytest.raises(NotFound) as missing:
        kube.get(SECRETS, "nope", namespace)
    assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    assert "nope" in missing.value.message

    kube.create(CONFIGMAPS, configmap("dup"), namespace)
    with pytest.raises(AlreadyExists) as dup:
        kube.create(CONFIGMAPS, configmap("dup"), namespace)
    assert (dup.value.status, dup.value.reason) == (409, "AlreadyExists")
    assert isinstance(dup.value, Conflict)

    with pytest.raises(Invalid) as invalid:
        kube.create(CONFIGMAPS, configmap("Not_A_DNS_Name"), namespace)
    assert (invalid.value.status, invalid.value.reason) == (422, "Invalid")
    assert [c.field for c in invalid.value.causes] == ["metadata.name"]


def test_custom_resource_validation_names_the_field(
    kube: KubeClient, namespace: str, widgets_crd: ResourceType
) -> None:
    with pytest.raises(Invalid) as caught:
        kube.create(widgets_crd, widget("w-bad", 0), namespace)
    assert "spec.size" in {c.field for c in caught.value.causes}


# --- custom resources and subresources ------------------------------------------------


def test_custom_resource_status_subresource(kube: KubeClient, namespace: str, widgets_crd: ResourceType) -> None:
    created = kube.create(widgets_crd, widget("w1", 2), namespace)
    # Status written through the main resource is ignored when a status subresource exists.
    kube.patch(widgets_crd, "w1", {"status": {"phase": "Ignored"}}, namespace)
    assert "status" not in kube.get(widgets_crd, "w1", namespace)

    patched = kube.patch_status(widgets_crd, "w1", {"status": {"phase": "Running"}}, namespace)
    assert patched["status"] == {"phase": "Running"}
    assert patched["metadata"]["generation"] == created["metadata"]["generation"]
    assert kube.get_status(widgets_crd, "w1", namespace)["status"]["phase"] == "Running"

    applied = kube.apply(
        widgets_crd,
        {**widget("w1", 2), "status": {"phase": "Done"}},
        namespace,
        field_manager="operator",
        subresource="status",
    )
    assert applied["status"]["phase"] == "Done"
    current = kube.get(widgets_crd, "w1", namespace)
    current["status"] = {"phase": "Replaced"}
    assert kube.replace_status(widgets_crd, current, namespace)["status"]["phase"] == "Replaced"


def test_pod_binding_and_pod_status(kube: KubeClient, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": "busybox"}]},
    }
    created = kube.create(PODS, pod, namespace)
    assert created["status"]["phase"] == "Pending"
    kube.bind_pod(namespace, "p", "local-node", pod_uid=created["metadata"]["uid"])
    assert kube.get(PODS, "p", namespace)["spec"]["nodeName"] == "local-node"
    with pytest.raises(Conflict):
        kube.bind_pod(namespace, "p", "other-node")
    status = kube.patch_status(PODS, "p", {"status": {"phase": "Running", "podIP": "127.0.0.1"}}, namespace)
    assert status["status"]["phase"] == "Running"


# --- watch -----------------------------------------------------------------------------


def test_watch_receives_added_modified_deleted(kube: KubeClient, namespace: str) -> None:
    start = kube.list(CONFIGMAPS, namespace)["metadata"]["resourceVersion"]
    kube.create(CONFIGMAPS, configmap("w", {"v": "1"}), namespace)
    kube.patch(CONFIGMAPS, "w", {"data": {"v": "2"}}, namespace)
    kube.delete(CONFIGMAPS, "w", namespace)

    seen: list[WatchEvent] = []
    for event in kube.watch(CONFIGMAPS, namespace, resource_version=start, timeout_seconds=20):
        if event.type == "BOOKMARK":
            continue
        seen.append(event)
        if event.type == "DELETED":
            break
    assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    assert seen[1].object["data"] == {"v": "2"}


def test_watch_streams_live_events_with_label_selector(kube: KubeClient, namespace: str) -> None:
    start = kube.list(CONFIGMAPS, namespace)["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        for event in kube.watch(
            CONFIGMAPS, namespace, resource_version=start, label_selector="watched=yes", timeout_seconds=20
        ):
            if event.type != "BOOKMARK":
                seen.append((event.type, event.object["metadata"]["name"]))
            if event.type == "DELETED":
                return

    thread = threading.Thread(target=consume)
    thread.start()
    kube.create(CONFIGMAPS, configmap("ignored"), namespace)
    kube.create(CONFIGMAPS, configmap("live", labels={"watched": "yes"}), namespace)
    kube.delete(CONFIGMAPS, "live", namespace)
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert seen == [("ADDED", "live"), ("DELETED", "live")]


def test_watch_with_initial_events_lists_then_bookmarks_then_streams(kube: KubeClient, namespace: str) -> None:
    kube.create(CONFIGMAPS, configmap("existing"), namespace)
    seen: list[tuple[str, str]] = []
    bookmark_rv = ""
    for event in kube.watch(CONFIGMAPS, namespace, send_initial_events=True, timeout_seconds=20):
        if event.initial_events_end:
            bookmark_rv = event.resource_version
            kube.create(CONFIGMAPS, configmap("later"), namespace)
            continue
        seen.append((event.type, event.object["metadata"]["name"]))
        if event.object["metadata"]["name"] == "later":
            break
    assert seen == [("ADDED", "existing"), ("ADDED", "later")]
    assert int(bookmark_rv) > 0


def test_watch_error_line_becomes_gone() -> None:
    # The shape the API server streams when a watch's resourceVersion was compacted
    # away. (A fresh apiserver's watch cache still serves old versions, so this
    # pure-parsing test stands in for the live case.)
    line = json.dumps(
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "Expired",
                "code": 410,
                "message": "too old resource version: 1 (202)",
            },
        }
    )
    with pytest.raises(Gone) as caught:
        AsyncKubeClient._decode_watch_line(line)
    assert (caught.value.status, caught.value.reason) == (410, "Expired")
    assert "too old" in caught.value.message
    assert AsyncKubeClient._decode_watch_line("") is None
    with pytest.raises(TransportError) as broken:
        AsyncKubeClient._decode_watch_line('{"type":"ADDED","obj')
    assert broken.value.retryable


# --- async -----------------------------------------------------------------------------


async def test_async_client_crud_and_watch(control_plane: ControlPlane, namespace: str) -> None:
    async with control_plane.admin_async_client() as kube:
        start = (await kube.list(CONFIGMAPS, namespace))["metadata"]["resourceVersion"]
        events: list[str] = []

        async def consume() -> None:
            async for event in kube.watch(CONFIGMAPS, namespace, resource_version=start, timeout_seconds=20):
                if event.type != "BOOKMARK":
                    events.append(event.type)
                if event.type == "DELETED":
                    return

        watcher = asyncio.create_task(consume())
        await kube.create(CONFIGMAPS, configmap("a", {"x": "1"}), namespace)
        applied = await kube.apply(CONFIGMAPS, configmap("a", {"x": "2"}), namespace, field_manager="t")
        assert applied["data"] == {"x": "2"}
        with pytest.raises(AlreadyExists):
            await kube.create(CONFIGMAPS, configmap("a"), namespace)
        names = [i["metadata"]["name"] async for i in kube.iter_items(CONFIGMAPS, namespace)]
        assert "a" in names
        await kube.delete(CONFIGMAPS, "a", namespace)
        await asyncio.wait_for(watcher, 30)
        assert events == ["ADDED", "MODIFIED", "DELETED"]
    async with AsyncKubeClient.from_kubeconfig(control_plane.kubeconfig_path) as other:
        with pytest.raises(NotFound):
            await other.get(CONFIGMAPS, "a", namespace)


async def test_akube_fixture_patches_status(akube: AsyncKubeClient, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "s"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    await akube.create(PODS, pod, namespace)
    await akube.bind_pod(namespace, "s", "n1")
    patched = await akube.patch_status(PODS, "s", {"status": {"phase": "Succeeded"}}, namespace)
    assert patched["status"]["phase"] == "Succeeded"
    assert (await akube.get_status(PODS, "s", namespace))["spec"]["nodeName"] == "n1"
    deleted = await akube.delete(PODS, "s", namespace, grace_period_seconds=0)
    assert deleted["metadata"]["name"] == "s"


async def test_http2_client_speaks_h2_to_the_api_server_and_works(control_plane: ControlPlane, namespace: str) -> None:
    config = load_kubeconfig(control_plane.kubeconfig_path)
    async with AsyncKubeClient(config, http2=True) as kube:
        names = [f"h2-{i}" for i in range(20)]
        # Concurrent writes share the one multiplexed connection.
        await asyncio.gather(*(kube.create(CONFIGMAPS, configmap(n, {"i": n}), namespace) for n in names))
        patched = await asyncio.gather(*(kube.patch(CONFIGMAPS, n, {"data": {"p": "1"}}, namespace) for n in names))
        assert [p["data"] for p in patched] == [{"i": n, "p": "1"} for n in names]
        with pytest.raises(NotFound):
            await kube.get(CONFIGMAPS, "h2-missing", namespace)
        # The protocol the TLS handshake agreed (ALPN), read off the transport the client
        # uses: a client that silently fell back to HTTP/1.1 would pass the rest.
        answer = await kube._http.get(
            f"/api/v1/namespaces/{namespace}/configmaps/h2-0", headers=kube._headers(RequestSpec("GET", ""))
        )
        assert answer.status_code == 200 and answer.http_version == "HTTP/2"


async def test_requests_in_flight_are_capped_by_max_in_flight() -> None:
    """A burst waits in the client (a semaphore), never more than max_in_flight on the wire."""
    total, cap = 10, 3
    state = {"current": 0, "most": 0, "finished": 0}
    changed = asyncio.Condition()

    async def handler(request: web.Request) -> web.Response:
        async with changed:
            state["current"] += 1
            state["most"] = max(state["most"], state["current"])
            changed.notify_all()
            # Answer only once `cap` requests are in at once (or all that are left):
            # the test ends only if the client lets `cap` through, and it counts more.
            await changed.wait_for(lambda: state["current"] >= min(cap, total - state["finished"]))
            state["current"] -= 1
            state["finished"] += 1
            changed.notify_all()
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/configmaps/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with AsyncKubeClient(KubeConfig(server=f"http://127.0.0.1:{port}"), max_in_flight=cap) as kube:
            got = await asyncio.wait_for(
                asyncio.gather(*(kube.get(CONFIGMAPS, f"c{i}", "ns") for i in range(total))), 60
            )
    finally:
        await runner.cleanup()
    assert [g["metadata"]["name"] for g in got] == [f"c{i}" for i in range(total)]
    assert state["most"] == cap


async def test_urgent_requests_take_the_next_free_slot_before_the_backlog() -> None:
    """With every slot taken and a backlog waiting, a request made under urgent() is sent
    as soon as one slot frees, ahead of everything queued before it."""
    order: list[str] = []
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        order.append(name)
        if name == "first":
            await release.wait()
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": name}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/configmaps/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()

    async def urgent_get(kube: AsyncKubeClient) -> Any:
        with urgent():
            return await kube.get(CONFIGMAPS, "urgent", "ns")

    try:
        async with AsyncKubeClient(KubeConfig(server=f"http://127.0.0.1:{port}"), max_in_flight=1) as kube:
            first = asyncio.create_task(kube.get(CONFIGMAPS, "first", "ns"))
            while order != ["first"]:
                await asyncio.sleep(0.01)
            backlog = [asyncio.create_task(kube.get(CONFIGMAPS, f"b{i}", "ns")) for i in range(5)]
            await asyncio.sleep(0.05)  # the backlog is queued in the client
            late = asyncio.create_task(urgent_get(kube))
            await asyncio.sleep(0.05)
            release.set()
            await asyncio.wait_for(asyncio.gather(first, late, *backlog), 60)
    finally:
        await runner.cleanup()
    assert order == ["first", "urgent", "b0", "b1", "b2", "b3", "b4"]


def test_max_in_flight_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_in_flight must be at least 1"):
        AsyncKubeClient(KubeConfig(server="https://127.0.0.1:1"), max_in_flight=0)


# --- config loading --------------------------------------------------------------------


def _grant_pod_reading(kube: KubeClient, namespace: str, serviceaccount: str) -> None:
    kube.create(
        ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
        namespace,
    )
    kube.create(
        ROLEBINDINGS,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
            "subjects": [{"kind": "ServiceAccount", "name": serviceaccount, "namespace": namespace}],
        },
        namespace,
    )


def test_in_cluster_config_from_a_token_dir(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path, rbac_eventually: Any
) -> None:
    token_dir = tmp_path / "serviceaccount"
    token_dir.mkdir()
    (token_dir / "token").write_text(control_plane.mint_token(namespace, "incluster") + "\n")
    (token_dir / "ca.crt").write_bytes(control_plane.pki.ca_cert.read_bytes())
    (token_dir / "namespace").write_text(namespace)
    port = control_plane.server_url.rsplit(":", 1)[1]
    config = load_incluster(token_dir, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port})
    assert config.namespace == namespace
    with KubeClient(config) as as_pod:
        with pytest.raises(Forbidden):
            as_pod.list(PODS, config.namespace)
        _grant_pod_reading(kube, namespace, "incluster")
        assert rbac_eventually(lambda: as_pod.list(PODS, config.namespace))["items"] == []


def test_kubeconfig_with_certificate_files(control_plane: ControlPlane, tmp_path: Path) -> None:
    pki = control_plane.pki
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": control_plane.server_url, "certificate-authority": str(pki.ca_cert)}}
        ],
        # Relative paths resolve against the kubeconfig's directory, as kubectl does.
        "users": [{"name": "u", "user": {"client-certificate": "admin.crt", "client-key": "admin.key"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "kube-system"}}],
        "current-context": "x",
    }
    (tmp_path / "admin.crt").write_bytes(pki.admin_cert.read_bytes())
    (tmp_path / "admin.key").write_bytes(pki.admin_key.read_bytes())
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    config = load_kubeconfig(path)
    assert config.namespace == "kube-system"
    with KubeClient(config) as kube:
        assert kube.request("GET", "/version")["gitVersion"] == control_plane.binaries.versions.kubernetes
    embedded = load_kubeconfig(control_plane.kubeconfig_path)
    assert embedded.client_cert_pem == pki.admin_cert.read_bytes()
    assert base64.b64encode(embedded.ca_pem or b"")


# --- transport errors and retries -----------------------------------------------------


def test_connection_refused_is_a_retryable_transport_error() -> None:
    with KubeClient(KubeConfig(server=f"https://127.0.0.1:{free_port()}"), timeout=5) as kube:
        with pytest.raises(TransportError) as caught:
            kube.get(CONFIGMAPS, "x", "default")
    assert caught.value.retryable


async def test_retry_retries_only_retryable_errors() -> None:
    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ServerError("etcd leader changed", status=500)
        return "ok"

    assert await aretry(flaky, policy=FAST) == "ok"
    assert len(calls) == 3

    async def missing() -> None:
        calls.append(1)
        raise NotFound("gone", status=404)

    calls.clear()
    with pytest.raises(NotFound):
        await aretry(missing, policy=FAST)
    assert len(calls) == 1

    async def always_down() -> None:
        calls.append(1)
        raise TransportError("refused")

    calls.clear()
    with pytest.raises(TransportError):
        await aretry(always_down, policy=FAST.model_copy(update={"attempts": 4}))
    assert len(calls) == 4
