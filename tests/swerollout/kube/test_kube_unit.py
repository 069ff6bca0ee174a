"""Pure logic of the kube client: addressing, error mapping, config loading errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from swerollout.backoff import Backoff
from swerollout.kube import (
    NAMESPACES,
    PODS,
    SWEROLLOUTS,
    AlreadyExists,
    ConfigError,
    Conflict,
    Invalid,
    ServerError,
    TooManyRequests,
    aretry,
    load_config,
    load_incluster,
    load_kubeconfig,
)
from swerollout.kube.config import ProjectedToken
from swerollout.kube.errors import ApiError, error_from_response


def test_paths_for_core_group_cluster_scope_and_subresources() -> None:
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns", "p", "binding") == "/api/v1/namespaces/ns/pods/p/binding"
    assert SWEROLLOUTS.path("ns", "r", "status") == "/apis/swerollout.io/v1alpha1/namespaces/ns/swerollouts/r/status"
    assert NAMESPACES.path(None, "default") == "/api/v1/namespaces/default"
    assert (SWEROLLOUTS.group, SWEROLLOUTS.version) == ("swerollout.io", "v1alpha1")
    with pytest.raises(ValueError, match="cluster-scoped"):
        NAMESPACES.path("ns", "x")
    with pytest.raises(ValueError, match="namespaced"):
        PODS.path(None, "p")


def test_status_bodies_map_to_the_error_family() -> None:
    invalid = error_from_response(
        422,
        b'{"kind":"Status","reason":"Invalid","message":"bad","details":{"causes":'
        b'[{"reason":"FieldValueRequired","message":"Required value","field":"spec.image"}]}}',
    )
    assert isinstance(invalid, Invalid)
    assert [(c.field, c.reason) for c in invalid.causes] == [("spec.image", "FieldValueRequired")]
    assert isinstance(error_from_response(409, b'{"kind":"Status","reason":"AlreadyExists"}'), AlreadyExists)
    conflict = error_from_response(409, b'{"kind":"Status","reason":"Conflict"}')
    assert isinstance(conflict, Conflict) and not isinstance(conflict, AlreadyExists)
    throttled = error_from_response(
        429, b'{"kind":"Status","reason":"TooManyRequests","details":{"retryAfterSeconds":2}}'
    )
    assert isinstance(throttled, TooManyRequests)
    assert throttled.retryable and throttled.retry_after_seconds == 2
    gateway = error_from_response(503, b"<html>upstream down</html>")
    assert isinstance(gateway, ServerError) and gateway.retryable
    assert "upstream down" in gateway.message
    odd = error_from_response(418, b"")
    assert type(odd) is ApiError and not odd.retryable


async def test_retry_waits_at_least_the_servers_hint() -> None:
    attempts: list[int] = []

    async def throttled_once() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise TooManyRequests("slow down", status=429, body={"details": {"retryAfterSeconds": 0.05}})
        return "done"

    began = time.monotonic()
    assert await aretry(throttled_once, policy=Backoff(first_seconds=0.0001, attempts=5)) == "done"
    assert len(attempts) == 2
    assert time.monotonic() - began >= 0.05, "the pause is the server's Retry-After, not the policy's 0.1 ms"


def test_kubeconfig_errors_name_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "config"
    base = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    # A plugin that cannot run is named, with what to do.
    path.write_text(
        yaml.safe_dump(
            {
                **base,
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": str(tmp_path / "no-such-plugin"),
                            }
                        },
                    }
                ],
            }
        )
    )
    with pytest.raises(ConfigError, match="exec credential plugin .*no-such-plugin.* gave no credentials"):
        load_kubeconfig(path)
    path.write_text(yaml.safe_dump({**base, "users": []}))
    with pytest.raises(ConfigError, match="no user named 'u'"):
        load_kubeconfig(path)
    path.write_text(yaml.safe_dump({**base, "users": [{"name": "u", "user": {"token": "t"}}]}))
    assert load_kubeconfig(path).bearer_token() == "t"
    with pytest.raises(ConfigError, match="no context named 'other'"):
        load_kubeconfig(path, context="other")


def test_incluster_needs_the_service_host_and_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_incluster(tmp_path, {})
    with pytest.raises(ConfigError, match="token"):
        load_incluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    (tmp_path / "token").write_text("abc\n")
    (tmp_path / "ca.crt").write_text("not used until connecting")
    config = load_incluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    assert config.server == "https://[fd00::1]:6443"
    assert config.bearer_token() == "abc"
    assert config.namespace == "default"


def test_incluster_token_is_reread_as_the_kubelet_rotates_it(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    now = [0.0]
    source = ProjectedToken(token, every_seconds=60, clock=lambda: now[0])
    assert source() == "first"
    token.write_text("second\n")
    now[0] = 59.0
    assert source() == "first"  # not re-read on every request
    now[0] = 60.0
    assert source() == "second"
    token.unlink()  # the kubelet swapping the file: keep what we have
    now[0] = 200.0
    assert source() == "second"
    with pytest.raises(ConfigError, match="cannot read the in-cluster token"):
        ProjectedToken(token)()


def test_incluster_config_reads_no_kubernetes_package(tmp_path: Path) -> None:
    """The operator's in-cluster identity costs no import of the 45 MB `kubernetes` package."""
    import subprocess
    import sys

    (tmp_path / "token").write_text("abc")
    (tmp_path / "ca.crt").write_text("pem")
    (tmp_path / "namespace").write_text("ops")
    code = (
        "import sys; from swerollout.kube import load_incluster; "
        f"c = load_incluster({str(tmp_path)!r}, {{'KUBERNETES_SERVICE_HOST': '10.0.0.1'}}); "
        "print(c.namespace, c.bearer_token(), 'kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["ops", "abc", "False"]


def test_load_config_search_order(tmp_path: Path) -> None:
    def write(name: str, server: str) -> Path:
        doc = {
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc))
        return path

    explicit = write("explicit", "https://explicit:1")
    from_env = write("env", "https://env:1")
    write("home/.kube/config", "https://home:1")
    home = str(tmp_path / "home")
    env = {"KUBECONFIG": f"{from_env}:{explicit}", "HOME": home}
    assert load_config(explicit, environ=env).server == "https://explicit:1"
    assert load_config(environ=env).server == "https://env:1"
    assert load_config(environ={"HOME": home}).server == "https://home:1"
    token_dir = tmp_path / "sa"
    token_dir.mkdir()
    (token_dir / "token").write_text("tok")
    (token_dir / "ca.crt").write_text("")
    pod_env = {"HOME": str(tmp_path / "nohome"), "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    # An empty CA is a broken identity, refused as client-go refuses it.
    with pytest.raises(ConfigError, match="CA file .* is empty"):
        load_config(environ=pod_env, incluster_dir=token_dir)
    (token_dir / "ca.crt").write_text("not used until connecting")
    assert load_config(environ=pod_env, incluster_dir=token_dir).server == "https://10.0.0.1:443"
    with pytest.raises(ConfigError, match="no Kubernetes credentials"):
        load_config(environ={"HOME": str(tmp_path / "nohome")}, incluster_dir=token_dir)
