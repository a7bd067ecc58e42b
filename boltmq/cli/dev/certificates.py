"""Throwaway certificates for ``boltmq dev --tls`` and the TLS tests.

:func:`generate` writes two self-signed CAs into one directory, so an
application's certificate can never pass for a component's:

- the **internal CA** issues one certificate per component (registry, and per
  broker group its broker, HA service and store). Each is both the
  component's server certificate (SAN: ``localhost``, ``127.0.0.1``, ``::1``,
  the host's name and any extra host) and the one it presents on its own
  calls, and names the component in a URI SAN ``boltmq://<group>/<role>``
  (:mod:`boltmq.kernel.peer_identity`);
- the **application CA** issues the applications' and the CLI's client
  certificate, which names no component.

File                  | Holds
----------------------+------------------------------------------------------------
ca.pem                | the internal CA certificate (what clients trust for servers)
app-ca.pem            | the application CA certificate (what brokers, registries
                      | and HA services accept application certificates from)
client.pem            | application client certificate (clientAuth), app CA
client.key            | its private key
registry.pem / .key   | the registry's certificate (``boltmq:///registry``)
<group>-<role>.pem    | a component's certificate (serverAuth + clientAuth),
<group>-<role>.key    | ``boltmq://<group>/<role>``, role broker, ha or store

internal-ca.key       | the internal CA's private key, only with ``keep_internal_ca_key``
                      | (tests that sign a revocation list with it)

Keys are ECDSA P-256 (fast to make, accepted by gRPC's BoringSSL), private
keys PKCS#8, unencrypted, mode 0600; the CA keys are not written unless asked. The
certificates last ``VALID_DAYS``. They are for a laptop only: production
certificates come from the operator's own CAs (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
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


COMPONENT_ROLES = ("broker", "ha", "store")
"""Roles that get one certificate per broker group (the registry gets one in all)."""
APPLICATION_PORTS = ("broker", "ha", "registry")
"""Services whose port also accepts application certificates (the store's does not)."""


@dataclass(frozen=True)
class DevCertificates:
    """Paths of the files :func:`generate` wrote into ``directory``."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        """The internal CA: issues component certificates; clients trust it for servers."""
        return self.directory / "ca.pem"

    @property
    def app_ca_file(self) -> Path:
        """The application CA: issues application (client) certificates."""
        return self.directory / "app-ca.pem"

    @property
    def client_cert_file(self) -> Path:
        """The application's client certificate."""
        return self.directory / "client.pem"

    @property
    def client_key_file(self) -> Path:
        return self.directory / "client.key"

    @property
    def internal_ca_key_file(self) -> Path:
        return self.directory / "internal-ca.key"

    def component_files(self, role: str, group: str = "") -> tuple[Path, Path]:
        """Certificate and key of the component ``role`` of broker group ``group``."""
        stem = "registry" if role == "registry" else f"{group}-{role}"
        return self.directory / f"{stem}.pem", self.directory / f"{stem}.key"

    def settings_for(self, role: str, group: str = "broker-a") -> tuple[str, ...]:
        """``NAME=VALUE`` settings of service ``role`` of ``group``: its own certificate on
        its port and its calls, internal identities checked, applications accepted where
        they call."""
        cert, key = self.component_files(role, group)
        settings = [
            f"tls_cert_file={cert}",
            f"tls_key_file={key}",
            f"tls_ca_file={self.ca_file}",
            f"tls_client_cert_file={cert}",
            f"tls_client_key_file={key}",
            f"tls_internal_ca_file={self.ca_file}",
        ]
        if role in APPLICATION_PORTS:
            settings.append(f"tls_client_ca_file={self.app_ca_file}")
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
    usages: list[x509.ObjectIdentifier],
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    alt_names: x509.SubjectAlternativeName | None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(name, ca.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if alt_names is not None:
        builder = builder.add_extension(alt_names, critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(common_name)
    ca = (
        _builder(common_name, ca_name, ca_key)
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
    return ca, ca_key


def _write_pair(
    cert_file: Path, key_file: Path, pair: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
) -> None:
    _write(cert_file, pair[0].public_bytes(serialization.Encoding.PEM))
    _write(key_file, _key_pem(pair[1]), secret=True)


def generate(
    directory: Path,
    hosts: tuple[str, ...] = (),
    groups: tuple[str, ...] = ("broker-a",),
    *,
    keep_internal_ca_key: bool = False,
) -> DevCertificates:
    """Write fresh CAs, component certificates for the registry and every group in
    ``groups``, and an application client certificate into ``directory`` (created);
    with ``keep_internal_ca_key`` the internal CA's private key too."""
    directory.mkdir(parents=True, exist_ok=True)
    files = DevCertificates(directory)
    # A name of its own per run: TLS stacks find a peer's issuer by name, so two
    # generated CAs trusted side by side must not share one.
    run = secrets.token_hex(4)
    internal_ca, internal_key = _ca(f"BoltMQ dev internal CA {run}")
    app_ca, app_key = _ca(f"BoltMQ dev application CA {run}")
    _write(files.ca_file, internal_ca.public_bytes(serialization.Encoding.PEM))
    _write(files.app_ca_file, app_ca.public_bytes(serialization.Encoding.PEM))
    if keep_internal_ca_key:
        _write(files.internal_ca_key_file, _key_pem(internal_key), secret=True)
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    hosts_san = _alt_names(hosts)
    components = [("registry", ""), *((r, g) for g in groups for r in COMPONENT_ROLES)]
    for role, group in components:
        uri = x509.UniformResourceIdentifier(f"boltmq://{group}/{role}")
        names = x509.SubjectAlternativeName([*hosts_san, uri])
        pair = _leaf(f"boltmq-{group}-{role}", both, internal_ca, internal_key, names)
        _write_pair(*files.component_files(role, group), pair)
    client = _leaf("boltmq-application", [ExtendedKeyUsageOID.CLIENT_AUTH], app_ca, app_key, None)
    _write_pair(files.client_cert_file, files.client_key_file, client)
    return files
