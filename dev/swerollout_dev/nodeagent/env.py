"""Container environment the way Kubernetes builds it.

envFrom first, then env (later wins); ``$(VAR)`` refers to a variable defined
earlier in the list (``$$`` escapes), and the same expansion applies to command
and args. Secret/ConfigMap values come from a pre-fetched lookup so this module
does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .errors import ContainerConfigError, ReferenceNotFound
from .podspec import Container, Pod

# (kind, name) -> decoded data, or None when the object does not exist.
Lookup = Callable[[str, str], Mapping[str, bytes] | None]

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def referenced_objects(pod: Pod) -> set[tuple[str, str]]:
    """Every (kind, name) of Secret/ConfigMap the pod's env and volumes need."""
    refs: set[tuple[str, str]] = set()
    for c in [*pod.spec.init_containers, *pod.spec.containers]:
        for e in c.env:
            src = e.value_from
            if src and src.secret_key_ref:
                refs.add(("Secret", src.secret_key_ref.name))
            if src and src.config_map_key_ref:
                refs.add(("ConfigMap", src.config_map_key_ref.name))
        for ef in c.env_from:
            if ef.secret_ref:
                refs.add(("Secret", ef.secret_ref.name))
            if ef.config_map_ref:
                refs.add(("ConfigMap", ef.config_map_ref.name))
    for v in pod.spec.volumes:
        if v.secret:
            refs.add(("Secret", v.secret.secret_name))
        if v.config_map:
            refs.add(("ConfigMap", v.config_map.name))
    return refs


def field_value(pod: Pod, path: str, pod_ip: str) -> str:
    meta = pod.metadata
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "status.podIP": pod_ip,
        "status.hostIP": pod_ip,
        "spec.nodeName": pod.spec.node_name or "",
    }
    if path in simple:
        return simple[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        source = meta.labels if m.group(1) == "labels" else meta.annotations
        return source.get(m.group(2), "")
    raise ContainerConfigError(f"fieldRef {path!r} is not supported by the local node agent")


def _key(lookup: Lookup, kind: str, name: str, key: str, optional: bool, what: str) -> str | None:
    data = lookup(kind, name)
    if data is None or key not in data:
        if optional:
            return None
        missing = f"{kind} {name!r}" if data is None else f"key {key!r} in {kind} {name!r}"
        raise ReferenceNotFound(f"{what}: {missing} not found")
    return data[key].decode("utf-8", errors="replace")


def container_env(pod: Pod, container: Container, lookup: Lookup, pod_ip: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for ef in container.env_from:
        kind, ref = ("Secret", ef.secret_ref) if ef.secret_ref else ("ConfigMap", ef.config_map_ref)
        if ref is None:
            continue
        data = lookup(kind, ref.name)
        if data is None:
            if ref.optional:
                continue
            raise ReferenceNotFound(f"container {container.name!r} envFrom: {kind} {ref.name!r} not found")
        for k, v in data.items():
            env[ef.prefix + k] = v.decode("utf-8", errors="replace")
    for e in container.env:
        what = f"container {container.name!r} env {e.name!r}"
        src = e.value_from
        value: str | None
        if src is None:
            value = expand(e.value or "", env)
        elif src.secret_key_ref:
            r = src.secret_key_ref
            value = _key(lookup, "Secret", r.name, r.key, r.optional, what)
        elif src.config_map_key_ref:
            r = src.config_map_key_ref
            value = _key(lookup, "ConfigMap", r.name, r.key, r.optional, what)
        elif src.field_ref:
            value = field_value(pod, src.field_ref.field_path, pod_ip)
        else:
            raise ContainerConfigError(f"{what}: valueFrom kind is not supported by the local node agent")
        if value is not None:
            env[e.name] = value
    return env
