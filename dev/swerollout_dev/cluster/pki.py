"""The node's certificates, issued by the control plane's CA (controlplane/certs.py).

Each component gets its own identity, so RBAC and the Node authorizer see who
acts: the kubelet is ``system:node:<name>`` in ``system:nodes`` (which is what the
Node authorizer and NodeRestriction admission key on), kube-proxy, the scheduler
and the controller-manager are the users the default RBAC roles bind. The API
server authenticates to the kubelet (logs, exec) with a client certificate of its
own. Serving certificates cover the addresses clients dial.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import BaseModel, ConfigDict

from swerollout_dev.controlplane.certs import Pki

from .config import ClusterConfig

VALIDITY = dt.timedelta(days=365)
APISERVER_KUBELET_CLIENT = "swerollout:kube-apiserver-kubelet-client"


class CertPair(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cert: Path
    key: Path


class NodePki(BaseModel):
    """Every certificate the node's components use, by role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_cert: Path
    apiserver: CertPair
    apiserver_kubelet_client: CertPair
    kubelet_client: CertPair
    kubelet_serving: CertPair
    kube_proxy: CertPair
    scheduler: CertPair
    controller_manager: CertPair


def _name(common_name: str, organization: str | None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _issue(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    directory: Path,
    stem: str,
    common_name: str,
    organization: str | None,
    *,
    server: bool,
    ips: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
) -> CertPair:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    sans += [x509.DNSName(name) for name in dns]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(cert=directory / f"{stem}.crt", key=directory / f"{stem}.key")
    fd = os.open(pair.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def issue_node_pki(ca: Pki, directory: Path, config: ClusterConfig) -> NodePki:
    """(Re)issue every node certificate under ``directory``; cheap (ECDSA), so done at each start."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(ca.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    signer = (ca_cert, ca_key)
    domain = config.cluster_domain
    return NodePki(
        ca_cert=ca.ca_cert,
        apiserver=_issue(
            signer,
            directory,
            "apiserver",
            "kube-apiserver",
            None,
            server=True,
            ips=("127.0.0.1", config.node_ip, config.api_service_ip),
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                f"kubernetes.default.svc.{domain}",
            ),
        ),
        apiserver_kubelet_client=_issue(
            signer, directory, "apiserver-kubelet-client", APISERVER_KUBELET_CLIENT, None, server=False
        ),
        kubelet_client=_issue(
            signer, directory, "kubelet-client", f"system:node:{config.node_name}", "system:nodes", server=False
        ),
        kubelet_serving=_issue(
            signer,
            directory,
            "kubelet-serving",
            f"system:node:{config.node_name}",
            "system:nodes",
            server=True,
            ips=(config.node_ip, "127.0.0.1"),
            dns=(config.node_name,),
        ),
        kube_proxy=_issue(signer, directory, "kube-proxy", "system:kube-proxy", None, server=False),
        scheduler=_issue(signer, directory, "kube-scheduler", "system:kube-scheduler", None, server=False),
        controller_manager=_issue(
            signer, directory, "kube-controller-manager", "system:kube-controller-manager", None, server=False
        ),
    )
