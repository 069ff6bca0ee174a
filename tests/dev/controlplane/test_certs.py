"""The control plane's PKI: who the certs say they are, reuse, and renewal."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from swerollout_dev.controlplane.certs import ensure_pki


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certs_carry_the_identities_kubernetes_needs(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    ca, serving, admin = _cert(pki.ca_cert), _cert(pki.serving_cert), _cert(pki.admin_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for cert in (serving, admin):
        assert cert.issuer == ca.subject
        cert.verify_directly_issued_by(ca)  # raises if the signature does not check out
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert ExtendedKeyUsageOID.SERVER_AUTH in serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # RBAC: CN is the user name, O the groups; system:masters is the superuser group.
    assert admin.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert ExtendedKeyUsageOID.CLIENT_AUTH in admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    for key in (pki.ca_key, pki.serving_key, pki.admin_key, pki.sa_private_key):
        assert key.stat().st_mode & 0o077 == 0


def test_pki_is_reused_until_it_nears_expiry(tmp_path: Path) -> None:
    first = ensure_pki(tmp_path / "pki").ca_cert.read_bytes()
    assert ensure_pki(tmp_path / "pki").ca_cert.read_bytes() == first

    short = ensure_pki(tmp_path / "short", validity=dt.timedelta(days=2)).ca_cert.read_bytes()
    renewed = ensure_pki(tmp_path / "short").ca_cert.read_bytes()
    assert renewed != short
    assert _cert(tmp_path / "short" / "ca.crt").not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
