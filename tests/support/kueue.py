"""Kueue's own controller (sigs.k8s.io/kueue, built from its Go module) on the embedded
control plane, for the tests of rollout pods queued through Kueue's plain-Pod integration.

What Kueue needs here, and how it gets it:
- its CRDs: applied from the copy the build keeps beside the binary
  (``hack/k8s-bin/build.sh kueue``);
- its webhooks: Kueue's pod webhook gates each pod carrying a queue-name label
  (schedulingGate ``kueue.x-k8s.io/admission``) and adds its finalizer. No Service or
  kube-proxy exists here, so the API server calls the webhooks by URL on loopback and
  verifies a serving certificate issued by a CA made for this run. The webhook list is
  Kueue's own manifest with the clientConfig rewritten; the pod webhooks are limited to
  the namespaces labelled ``LABEL`` so nothing else on the control plane depends on Kueue;
- ``/etc/kueue/metrics/certs``, which v0.17's main reads when its internal certificate
  management is off: it runs in a private mount namespace with an overlay on /etc that
  holds them, so the host's /etc is not touched.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from swerollout_dev.controlplane.manager import free_port

LABEL = "swerollout.io/kueue-test"
KUEUE_GROUP = "kueue.x-k8s.io"


def kueue_dir() -> Path:
    """The versioned cache the build script fills (binary, CRDs, webhook manifest); a no-op
    when it is built (`make test` builds it first, like the kube binaries)."""
    proc = subprocess.run(
        ["bash", str(Path(__file__).resolve().parents[2] / "hack/k8s-bin/build.sh"), "kueue"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certs(directory: Path) -> bytes:
    """A CA and a serving cert for 127.0.0.1 (tls.crt, tls.key in ``directory``); returns the CA's PEM."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(
        "swerollout-test-kueue-ca",
        ca_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "swerollout-test-kueue-ca")]),
        ca_key,
        ca=True,
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert("127.0.0.1", key, ca.subject, ca_key, ca=False)
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(_pem_key(key))
    os.chmod(directory / "tls.key", 0o600)
    return ca.public_bytes(serialization.Encoding.PEM)


def webhook_configurations(manifest: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, called by URL on loopback: the pod webhooks and those
    of Kueue's own kinds (the other integrations are off here)."""
    out = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            resources = {r for rule in hook.get("rules") or [] for r in rule.get("resources") or []}
            if groups == {""} and resources == {"pods"}:
                hook["namespaceSelector"] = {"matchLabels": {LABEL: "true"}}
            elif groups != {KUEUE_GROUP}:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
            kept.append(hook)
        doc["metadata"] = {"name": f"swerollout-test-{doc['metadata']['name']}"}
        doc["webhooks"] = kept
        out.append(doc)
    return out


def kueue_config(port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["pod"]},
    }


@dataclass
class Kueue:
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def _kubectl(kubectl: Path, kubeconfig: Path, *args: str, input: str | None = None) -> str:
    proc = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@contextmanager
def running_kueue(workdir: Path, kubeconfig: Path, kubectl: Path) -> Iterator[Kueue]:
    """Kueue's controller and webhooks against the control plane of ``kubeconfig``; stopped after."""
    home = kueue_dir()
    workdir.mkdir(parents=True, exist_ok=True)
    ca_pem = make_certs(workdir / "serving")
    # The metrics certs v0.17 insists on reading (nobody scrapes them here).
    upper, work = workdir / "etc-upper", workdir / "etc-work"
    make_certs(upper / "kueue/metrics/certs")
    work.mkdir(exist_ok=True)
    port, health = free_port(), free_port()
    config = workdir / "config.yaml"
    config.write_text(yaml.safe_dump(kueue_config(port, health, workdir / "serving")))
    _kubectl(kubectl, kubeconfig, "apply", "--server-side", "-f", str(home / "crds"))
    _kubectl(kubectl, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(home / "crds"))
    hooks = webhook_configurations(home / "webhooks.yaml", port, ca_pem)
    log = workdir / "kueue.log"
    script = (
        f'mount -t overlay overlay -o lowerdir=/etc,upperdir="{upper}",workdir="{work}" /etc && '
        f'exec "{home / "kueue"}" --config="{config}" --kubeconfig="{kubeconfig}" '
        "--feature-gates=VisibilityOnDemand=false --zap-log-level=2"
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    kueue = Kueue(process, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"kueue exited {process.returncode}:\n{kueue.log_tail()}"
            try:
                if httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"kueue not ready in 120 s:\n{kueue.log_tail()}"
            time.sleep(0.5)
        # Webhooks last: the API server may call them only once Kueue answers.
        _kubectl(kubectl, kubeconfig, "apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(h) for h in hooks))
        yield kueue
    finally:
        for hook in hooks:
            subprocess.run(
                [
                    str(kubectl),
                    f"--kubeconfig={kubeconfig}",
                    "delete",
                    "--ignore-not-found",
                    hook["kind"].lower(),
                    hook["metadata"]["name"],
                ],
                capture_output=True,
                check=False,
            )
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(upper, ignore_errors=True)
