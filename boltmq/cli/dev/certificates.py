"""Throwaway certificates for ``boltmq dev --tls`` and the TLS tests.

:func:`generate` writes a self-signed CA, a server certificate (SAN:
``localhost``, ``127.0.0.1``, ``::1``, the host's name and any extra host
given) and a client certificate, all signed by that CA, into one directory:

File         | Holds
-------------+----------------------------------------------------------
ca.pem       | the CA certificate (what every side trusts)
server.pem   | server certificate (serverAuth), signed by the CA
server.key   | its private key (PKCS#8, unencrypted, mode 0600)
client.pem   | client certificate (clientAuth), signed by the CA
client.key   | its private key (PKCS#8, unencrypted, mode 0600)

Keys are ECDSA P-256 (fast to make, accepted by gRPC's BoringSSL); the
certificates last ``VALID_DAYS``. They are for a laptop only: production
certificates come from the operator's own CA (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30
"""Lifetime of every generated certificate."""
CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Certificates start this long before now, so a slightly late peer clock accepts them."""


@dataclass(frozen=True)
class DevCertificates:
    """Paths of the files :func:`generate` wrote."""

    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    client_cert_file: Path
    client_key_file: Path

    def server_settings(self, *, mutual: bool = True) -> tuple[str, ...]:
        """``NAME=VALUE`` settings of a service: serve with TLS, call others with TLS."""
        settings = [
            f"tls_cert_file={self.server_cert_file}",
            f"tls_key_file={self.server_key_file}",
            f"tls_ca_file={self.ca_file}",
            f"tls_client_cert_file={self.client_cert_file}",
            f"tls_client_key_file={self.client_key_file}",
        ]
        if mutual:
            settings.append(f"tls_client_ca_file={self.ca_file}")
        return tuple(settings)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "BoltMQ dev"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _alt_names(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(("localhost", "127.0.0.1", "::1", socket.gethostname(), *hosts)):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _write(path: Path, data: bytes, *, secret: bool = False) -> None:
    path.write_bytes(data)
    if secret:
        os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _leaf(
    name: str,
    usage: x509.ObjectIdentifier,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    alt_names: x509.SubjectAlternativeName | None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(name, ca.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if alt_names is not None:
        builder = builder.add_extension(alt_names, critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def generate(directory: Path, hosts: tuple[str, ...] = ()) -> DevCertificates:
    """Write a fresh CA, server and client certificate into ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("BoltMQ dev CA")
    ca = (
        _builder("BoltMQ dev CA", ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server, server_key = _leaf(
        "boltmq-server", ExtendedKeyUsageOID.SERVER_AUTH, ca, ca_key, _alt_names(hosts)
    )
    client, client_key = _leaf("boltmq-client", ExtendedKeyUsageOID.CLIENT_AUTH, ca, ca_key, None)
    files = DevCertificates(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
    )
    pem = serialization.Encoding.PEM
    _write(files.ca_file, ca.public_bytes(pem))
    _write(files.server_cert_file, server.public_bytes(pem))
    _write(files.server_key_file, _key_pem(server_key), secret=True)
    _write(files.client_cert_file, client.public_bytes(pem))
    _write(files.client_key_file, _key_pem(client_key), secret=True)
    return files
