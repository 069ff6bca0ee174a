"""How the client finds and proves itself to an API server.

Two sources: kubeconfig files and the in-cluster identity of a pod (token file + CA +
``KUBERNETES_SERVICE_HOST``); both end as one :class:`KubeConfig`. The in-cluster identity
is four small files, read here; kubeconfigs are not (see below).

Kubeconfigs are read by the official ``kubernetes`` package's loader, as kubectl reads
them: exec credential plugins (EKS, GKE, AKS), several files in ``$KUBECONFIG`` merged,
``tls-server-name``, ``proxy-url``, ``tokenFile``. Its credentials stay live: an exec
plugin's token is fetched again by the same loader once it expires.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from swerollout.kube.errors import ConfigError

INCLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


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
    namespace: str = "default"
    """Default namespace of the context (or of the pod, in-cluster)."""
    tls_server_name: str | None = None
    """Name to verify the server certificate against (and send as SNI) instead of the URL's host."""
    proxy_url: str | None = None
    """HTTP(S) proxy the API server is reached through."""

    _token_source: Callable[[], str | None] | None = PrivateAttr(default=None)

    def with_token_source(self, source: Callable[[], str | None]) -> KubeConfig:
        """Tokens that expire (exec plugins): ``source`` is asked on every request and caches itself."""
        self._token_source = source
        return self

    def bearer_token(self) -> str | None:
        if self._token_source is not None:
            return self._token_source()
        return self.token

    def http_options(self) -> dict[str, Any]:
        """Keyword arguments of the httpx client: TLS settings and the proxy."""
        options: dict[str, Any] = {"verify": self.ssl_context()}
        if self.proxy_url:
            options["proxy"] = self.proxy_url
        return options

    def request_extensions(self) -> dict[str, Any]:
        """Per-request httpx extensions: tls-server-name becomes the SNI and verified name."""
        return {"sni_hostname": self.tls_server_name} if self.tls_server_name else {}

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


def _read(path: str | None, what: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"kubeconfig {what}: cannot read {path}: {exc}") from exc


class _NamedEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class _KubeconfigShape(BaseModel):
    """The lists a kubeconfig must hold, checked before the loader sees the file: its own
    errors are tracebacks (TypeError, YAML dumps), ours are one line naming the field."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    clusters: list[_NamedEntry] | None = None
    contexts: list[_NamedEntry] | None = None
    users: list[_NamedEntry] | None = None
    current_context: str | None = Field(default=None, alias="current-context")


_FIX = "fix the file (`kubectl config view` prints a valid one)"


def _check_shape(file: str) -> None:
    try:
        doc = yaml.safe_load(Path(file).expanduser().read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read kubeconfig {file}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"kubeconfig {file} is not valid YAML ({problem}{where}): {_FIX}") from None
    if doc is None:
        return  # an empty file is an empty config, as kubectl reads it
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {file} holds a YAML {type(doc).__name__}, not a kubeconfig mapping: {_FIX}")
    try:
        _KubeconfigShape.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(
            f"kubeconfig {file}: {where}: {first['msg']}{more}; clusters, contexts and users are lists of "
            f"entries with a name: {_FIX}"
        ) from None


def load_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> KubeConfig:
    """Read a kubeconfig as kubectl does; ``path`` may list several files joined by os.pathsep
    (merged, first wins); ``context`` defaults to the current-context."""
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import list_kube_config_contexts, load_kube_config

    files = [p for p in str(path).split(os.pathsep) if p]
    existing = [f for f in files if Path(f).expanduser().is_file()]
    if not existing:
        raise ConfigError(f"cannot read kubeconfig {path}: no such file")
    for file in existing:
        _check_shape(file)
    joined = os.pathsep.join(existing)
    configuration = Configuration()
    try:
        contexts, current = list_kube_config_contexts(joined)
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        if not chosen:
            raise ConfigError(
                f"kubeconfig {path} has no context named {context!r}"
                if context
                else f"kubeconfig {path} has no current-context; pass context="
            )
        load_kube_config(joined, context=context, client_configuration=configuration, persist_config=False)
    except ConfigException as exc:
        raise ConfigError(f"kubeconfig {path}: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read kubeconfig {path}: {_first_line(exc)}") from exc
    except (TypeError, AttributeError, KeyError) as exc:
        # A shape the loader cannot walk that the check above let through.
        raise ConfigError(f"kubeconfig {path} is malformed ({type(exc).__name__}: {_first_line(exc)}): {_FIX}") from exc
    user_name = (chosen.get("context") or {}).get("user")
    user = _raw_entry(existing, "users", user_name)
    # kubernetes 35's loader does not read proxy-url (later releases do); it is one plain field.
    cluster = _raw_entry(existing, "clusters", (chosen.get("context") or {}).get("cluster")) or {}
    if user is None:
        raise ConfigError(f"kubeconfig {path} has no user named {user_name!r} (context {chosen.get('name')!r} uses it)")
    config = KubeConfig(
        server=str(configuration.host).rstrip("/"),
        ca_pem=_read(configuration.ssl_ca_cert, "certificate-authority"),
        insecure_skip_tls_verify=not configuration.verify_ssl,
        client_cert_pem=_read(configuration.cert_file, "client-certificate"),
        client_key_pem=_read(configuration.key_file, "client-key"),
        namespace=str((chosen.get("context") or {}).get("namespace") or "default"),
        tls_server_name=configuration.tls_server_name or None,
        proxy_url=getattr(configuration, "proxy", None) or cluster.get("proxy-url") or None,
    )
    if _token_key(configuration) is not None:
        return config.with_token_source(_live_token(configuration))
    if user.get("exec") and config.client_cert_pem is None:
        command = (user.get("exec") or {}).get("command")
        raise ConfigError(
            f"kubeconfig {path}: the exec credential plugin {command!r} gave no credentials; run it by hand to see why "
            "(is it installed and logged in?)"
        )
    return config


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _raw_entry(files: list[str], kind: str, name: str | None) -> dict[str, Any] | None:
    """The raw ``users``/``clusters`` entry called ``name`` (first file that defines it, as kubectl merges)."""
    if not name:
        return {}
    inner = kind.rstrip("s")
    for file in files:
        try:
            doc = yaml.safe_load(Path(file).expanduser().read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        for item in doc.get(kind) or []:
            if isinstance(item, dict) and item.get("name") == name:
                entry = item.get(inner)
                return entry if isinstance(entry, dict) else {}
    return None


def _token_key(configuration: Any) -> str | None:
    # kubernetes 35 files the token under "authorization", later releases under "BearerToken".
    return next((k for k in ("authorization", "BearerToken") if k in configuration.api_key), None)


def _live_token(configuration: Any) -> Callable[[], str | None]:
    """The loader's token, refreshed through its own hook (an exec plugin runs again once expired)."""

    def token() -> str | None:
        hook = configuration.refresh_api_key_hook
        if hook is not None:
            hook(configuration)
        key = _token_key(configuration)
        value = str(configuration.api_key.get(key) or "") if key else ""
        scheme, _, rest = value.partition(" ")
        return (rest if scheme.lower() == "bearer" else value).strip() or None

    return token


class ProjectedToken:
    """The ServiceAccount token of a pod, re-read as the kubelet rotates it: a projected
    token is rewritten well before it expires, and client-go re-reads the file once a
    minute; so do we. A failed re-read keeps the token we have (the kubelet swaps the
    file atomically, so a read error is transient); a file never read is an error."""

    def __init__(self, path: Path, every_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._every = every_seconds
        self._clock = clock
        self._value: str | None = None
        self._read_at = 0.0

    def __call__(self) -> str | None:
        now = self._clock()
        if self._value is None or now - self._read_at >= self._every:
            try:
                value = self._path.read_text().strip()
            except OSError as exc:
                if self._value is None:
                    raise ConfigError(f"cannot read the in-cluster token {self._path}: {exc.strerror or exc}") from exc
                return self._value
            self._value = value or self._value
            self._read_at = now
        return self._value


def load_incluster(
    token_dir: str | os.PathLike[str] = INCLUSTER_DIR, environ: dict[str, str] | None = None
) -> KubeConfig:
    """The identity Kubernetes mounts into a pod (``token``, ``ca.crt``, ``namespace``),
    read as client-go's InClusterConfig reads it; the token is re-read as it rotates.

    Read here rather than by the ``kubernetes`` package's loader: the operator runs
    in-cluster, and importing that package costs it 45 MB of its memory for four files.
    """
    env = dict(os.environ if environ is None else environ)
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    if not host:
        raise ConfigError("not running in a cluster: KUBERNETES_SERVICE_HOST is not set")
    port = env.get("KUBERNETES_SERVICE_PORT") or "443"
    directory = Path(token_dir)
    token, ca, ns_file = directory / "token", directory / "ca.crt", directory / "namespace"
    if not token.is_file():
        raise ConfigError(f"in-cluster token file {token} is missing (automountServiceAccountToken off?)")
    try:
        ca_pem = ca.read_bytes()
        namespace = ns_file.read_text().strip() if ns_file.is_file() else "default"
    except OSError as exc:
        raise ConfigError(f"cannot read the in-cluster identity in {directory}: {exc.strerror or exc}") from exc
    if not ca_pem.strip():
        raise ConfigError(
            f"in-cluster CA file {ca} is empty: the pod's ServiceAccount volume is broken; recreate the pod"
        )
    source = ProjectedToken(token)
    if not source():
        raise ConfigError(
            f"in-cluster token file {token} is empty: the pod's ServiceAccount volume is broken; recreate the pod"
        )
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return KubeConfig(server=server, ca_pem=ca_pem, namespace=namespace or "default").with_token_source(source)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def load_config(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    environ: dict[str, str] | None = None,
    incluster_dir: str | os.PathLike[str] = INCLUSTER_DIR,
) -> KubeConfig:
    """The usual search, like kubectl's: ``kubeconfig`` if given, else the files of
    ``$KUBECONFIG`` merged, else ~/.kube/config, else the in-cluster identity."""
    env = os.environ if environ is None else environ
    if kubeconfig is not None:
        return load_kubeconfig(kubeconfig, context)
    from_env = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if from_env:
        return load_kubeconfig(os.pathsep.join(from_env), context)
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


class ConfiguredClient:
    """What both clients are built from: one :class:`KubeConfig` and a request timeout,
    with the two usual ways of finding the config."""

    def __init__(self, config: KubeConfig, *, timeout: float = 30.0) -> None:
        self.config = config
        self.timeout = timeout

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str], context: str | None = None) -> Self:
        return cls(load_kubeconfig(path, context))

    @classmethod
    def in_cluster(cls, token_dir: str | os.PathLike[str] | None = None) -> Self:
        return cls(load_incluster(token_dir) if token_dir is not None else load_incluster())
