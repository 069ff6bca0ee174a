"""The PKI of a local control plane: one CA, the apiserver's serving cert, the admin
client cert, and the ServiceAccount token signing key pair.

ECDSA P-256 keys throughout: generating them takes microseconds (RSA 2048 takes
tens of milliseconds each on a busy core) and every Kubernetes component accepts
them, including for ServiceAccount tokens (ES256).
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

CERT_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=7)


class Pki(BaseModel):
    """Paths of every PKI file of one control plane (all under one directory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_private_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_public_key(self) -> Path:
        return self.dir / "sa.pub"

    def files(self) -> list[Path]:
        return [
            self.ca_cert,
            self.ca_key,
            self.serving_cert,
            self.serving_key,
            self.admin_cert,
            self.admin_key,
            self.sa_private_key,
            self.sa_public_key,
        ]

    def complete(self) -> bool:
        return all(p.is_file() for p in self.files())


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    usages: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName],
    validity: dt.timedelta,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # Backdate a little so a freshly made cert is valid on a clock that lags.
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=not ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _expires_soon(pki: Pki, margin: dt.timedelta) -> bool:
    horizon = dt.datetime.now(dt.UTC) + margin
    for path in (pki.ca_cert, pki.serving_cert, pki.admin_cert):
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError):
            return True
        if cert.not_valid_after_utc < horizon:
            return True
    return False


def ensure_pki(
    directory: Path, *, validity: dt.timedelta = CERT_VALIDITY, renew_before: dt.timedelta = RENEW_BEFORE
) -> Pki:
    """Create the PKI in ``directory`` unless a complete, unexpiring one is already there.

    Reusing it keeps ServiceAccount tokens and kubeconfigs valid across restarts of
    the same workdir. A PKI whose certs expire within ``renew_before`` (or that cannot
    be read) is replaced as a whole, which invalidates tokens minted before.
    """
    pki = Pki(dir=directory)
    if pki.complete() and not _expires_soon(pki, renew_before):
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("swerollout-local-ca")
    ca_cert = _issue(ca_name, ca_key, ca_name, ca_key, ca=True, usages=[], sans=[], validity=validity)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    serving_cert = _issue(
        _name("kube-apiserver"),
        serving_key,
        ca_name,
        ca_key,
        ca=False,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=serving_sans,
        validity=validity,
    )

    # O=system:masters makes the admin a cluster superuser under RBAC.
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin_cert = _issue(
        _name("admin", "system:masters"),
        admin_key,
        ca_name,
        ca_key,
        ca=False,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
        sans=[],
        validity=validity,
    )

    sa_key = ec.generate_private_key(ec.SECP256R1())

    _write_private(pki.ca_key, _key_pem(ca_key))
    _write_private(pki.serving_key, _key_pem(serving_key))
    _write_private(pki.admin_key, _key_pem(admin_key))
    _write_private(pki.sa_private_key, _key_pem(sa_key))
    pki.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    pki.serving_cert.write_bytes(serving_cert.public_bytes(pem))
    pki.admin_cert.write_bytes(admin_cert.public_bytes(pem))
    # The CA cert last: its presence (with the others) marks the PKI complete.
    pki.ca_cert.write_bytes(ca_cert.public_bytes(pem))
    return pki
