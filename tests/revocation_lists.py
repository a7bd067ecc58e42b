"""Certificate revocation lists signed by a ``boltmq dev`` internal CA, for the tests."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from boltmq.cli.dev.certificates import DevCertificates


def write_crl(certificates: DevCertificates, path: Path, *revoked_roles: str) -> None:
    """A CRL signed by ``certificates``' internal CA revoking broker-a's ``revoked_roles``,
    written beside ``path`` and renamed over it (what an operator's rotation does)."""
    ca = x509.load_pem_x509_certificate(certificates.ca_file.read_bytes())
    key = serialization.load_pem_private_key(
        certificates.internal_ca_key_file.read_bytes(), password=None
    )
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.subject)
        .last_update(now)
        .next_update(now + datetime.timedelta(days=1))
    )
    for role in revoked_roles:
        cert_file, _ = certificates.component_files(role, "broker-a")
        serial = x509.load_pem_x509_certificate(cert_file.read_bytes()).serial_number
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
        )
    crl = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    staged = path.with_suffix(".new")
    staged.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    os.replace(staged, path)
