"""How the client finds and proves itself to an API server.

Two sources: a kubeconfig file (the admin file of our control plane, or any
cluster's) and the in-cluster identity of a pod (token file + CA +
``KUBERNETES_SERVICE_HOST``). Both end as one :class:`KubeConfig`.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, PrivateAttr

from swerollout.kube.errors import ConfigError

INCLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# Projected service-account tokens rotate on disk; re-read at most this often (seconds).
TOKEN_FILE_REFRESH_SECONDS = 60.0


class KubeConfig(BaseModel):
    """Everything needed to reach one API server as one identity."""

    model_config = ConfigDict(extra="forbid")

    server: str
    """Base URL, e.g. ``https://127.0.0.1:6443``."""
    ca_pem: bytes | None = None
    """PEM of the CA that signed the server cert; None = the system trust store."""
    insecure_skip_tls_verify: bool = False
    client_cert_pem: bytes | None = None
    """PEM client certificate (together with client_key_pem) for x509 auth."""
    client_key_pem: bytes | None = None
    token: str | None = None
    """Static bearer token."""
    token_file: Path | None = None
    """File holding a bearer token that may be rotated (in-cluster); wins over token."""
    namespace: str = "default"
    """Default namespace of the context (or of the pod, in-cluster)."""

    _token_cache: tuple[float, str] | None = PrivateAttr(default=None)

    def bearer_token(self) -> str | None:
        if self.token_file is not None:
            now = time.monotonic()
            if self._token_cache is None or now - self._token_cache[0] > TOKEN_FILE_REFRESH_SECONDS:
                try:
                    value = self.token_file.read_text().strip()
                except OSError as exc:
                    raise ConfigError(f"cannot read the bearer token file {self.token_file}: {exc}") from exc
                self._token_cache = (now, value)
            return self._token_cache[1]
        return self.token

    def ssl_context(self) -> ssl.SSLContext:
        """TLS settings: trust the cluster CA, present the client cert if any."""
        if self.insecure_skip_tls_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_pem is not None:
            ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        else:
            ctx = ssl.create_default_context()
        if self.client_cert_pem is not None:
            if self.client_key_pem is None:
                raise ConfigError("the kubeconfig user has a client certificate but no client key")
            # The ssl module only loads cert chains from files: use a private temp dir.
            with tempfile.TemporaryDirectory(prefix="swerollout-kube-") as tmp:
                cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
                cert.write_bytes(self.client_cert_pem)
                key.touch(mode=0o600)
                key.write_bytes(self.client_key_pem)
                ctx.load_cert_chain(cert, key)
        return ctx


def _read_data_or_file(entry: dict[str, Any], data_key: str, file_key: str, base: Path) -> bytes | None:
    if entry.get(data_key):
        try:
            return base64.b64decode(entry[data_key])
        except ValueError as exc:
            raise ConfigError(f"kubeconfig field {data_key} is not valid base64") from exc
    if entry.get(file_key):
        path = Path(entry[file_key])
        if not path.is_absolute():
            path = base / path
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"kubeconfig field {file_key}: cannot read {path}: {exc}") from exc
    return None


def _named(items: list[dict[str, Any]] | None, name: str, what: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            inner = item.get(what)
            return inner if isinstance(inner, dict) else {}
    raise ConfigError(f"kubeconfig {path} has no {what} named {name!r}")


def load_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> KubeConfig:
    """Read a kubeconfig file; ``context`` defaults to its current-context."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path} is not a YAML mapping")
    name = context or doc.get("current-context")
    if not name:
        raise ConfigError(f"kubeconfig {path} has no current-context; pass context=")
    ctx = _named(doc.get("contexts"), name, "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), "cluster", path)
    user = _named(doc.get("users"), str(ctx.get("user")), "user", path) if ctx.get("user") else {}
    if not cluster.get("server"):
        raise ConfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    base = path.parent
    token_file = user.get("tokenFile")
    has_credentials = any(
        user.get(k) for k in ("token", "tokenFile", "client-certificate", "client-certificate-data")
    )
    if not has_credentials and (user.get("exec") or user.get("auth-provider")):
        raise ConfigError(
            f"kubeconfig {path}: user {ctx.get('user')!r} uses an exec/auth-provider plugin, which this "
            f"client does not run; use a token or client-certificate kubeconfig"
        )
    return KubeConfig(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=_read_data_or_file(cluster, "certificate-authority-data", "certificate-authority", base),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        client_cert_pem=_read_data_or_file(user, "client-certificate-data", "client-certificate", base),
        client_key_pem=_read_data_or_file(user, "client-key-data", "client-key", base),
        token=user.get("token"),
        token_file=(base / token_file) if token_file else None,
        namespace=str(ctx.get("namespace") or "default"),
    )


def load_incluster(
    token_dir: str | os.PathLike[str] = INCLUSTER_DIR, environ: dict[str, str] | None = None
) -> KubeConfig:
    """The identity Kubernetes mounts into a pod (``token``, ``ca.crt``, ``namespace``)."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("not running in a cluster: KUBERNETES_SERVICE_HOST is not set")
    directory = Path(token_dir)
    token, ca = directory / "token", directory / "ca.crt"
    if not token.is_file():
        raise ConfigError(f"in-cluster token file {token} is missing (automountServiceAccountToken off?)")
    try:
        ca_pem = ca.read_bytes()
        ns_file = directory / "namespace"
        namespace = ns_file.read_text().strip() if ns_file.is_file() else "default"
    except OSError as exc:
        raise ConfigError(f"cannot read the in-cluster CA {ca}: {exc}") from exc
    # IPv6 service hosts need brackets in a URL.
    host_part = f"[{host}]" if ":" in host else host
    return KubeConfig(server=f"https://{host_part}:{port}", ca_pem=ca_pem, token_file=token, namespace=namespace)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def load_config(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    environ: dict[str, str] | None = None,
    incluster_dir: str | os.PathLike[str] = INCLUSTER_DIR,
) -> KubeConfig:
    """The usual search, like kubectl's: ``kubeconfig`` if given, else the first file
    in ``$KUBECONFIG``, else ~/.kube/config, else the in-cluster identity."""
    env = os.environ if environ is None else environ
    if kubeconfig is not None:
        return load_kubeconfig(kubeconfig, context)
    from_env = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if from_env:
        return load_kubeconfig(from_env[0], context)
    home = Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    if home.is_file():
        return load_kubeconfig(home, context)
    try:
        return load_incluster(incluster_dir, dict(env))
    except ConfigError as exc:
        raise ConfigError(
            f"no Kubernetes credentials found: pass a kubeconfig, set KUBECONFIG, create {home}, "
            f"or run in a pod ({exc})"
        ) from exc


def kubeconfig_document(
    server: str,
    ca_pem: bytes,
    *,
    user: str,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    namespace: str = "default",
    cluster: str = "swerollout",
) -> dict[str, Any]:
    """A one-context kubeconfig with everything embedded (no sibling files)."""
    user_entry: dict[str, Any] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        user_entry["client-certificate-data"] = _b64(client_cert_pem)
        user_entry["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        user_entry["token"] = token
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user, "namespace": namespace}}],
        "current-context": cluster,
        "preferences": {},
    }


def write_kubeconfig(path: str | os.PathLike[str], document: dict[str, Any]) -> Path:
    """Write a kubeconfig readable only by its owner (it holds credentials)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(document, fh, sort_keys=False)
    os.replace(tmp, path)
    return path
