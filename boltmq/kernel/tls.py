"""TLS credentials for every BoltMQ server and client, built from PEM files.

One module turns the ``tls_*`` settings of :class:`boltmq.kernel.config.ServerSettings`
(and the SDK's / CLI's ``--tls-*`` options) into gRPC credentials:

Setting                | Side    | Meaning
-----------------------+---------+---------------------------------------------------
tls_cert_file          | server  | certificate chain the server presents ("": plaintext)
tls_key_file           | server  | its private key
tls_client_ca_file     | server  | CA bundle; callers must present a certificate it signed
tls_ca_file            | client  | CA bundle trusted for outgoing calls ("": plaintext calls)
tls_client_cert_file   | client  | certificate presented on outgoing calls (mutual TLS)
tls_client_key_file    | client  | its private key
tls_internal_ca_file   | server  | internal CA (component certificates); trusted like
                       |         | tls_client_ca_file, and the only CA internal RPCs
                       |         | believe (boltmq.kernel.internal_gate); it may share
                       |         | no CA key with tls_client_ca_file (a ConfigError)

Every file is read and parsed once, at start-up, with ``cryptography``: a
missing, unreadable or non-PEM file is a :class:`TLSFileError` (a
:class:`~boltmq.kernel.config.ConfigError`) naming the setting and the path. Handing
the raw bytes to gRPC unchecked was rejected: gRPC only fails at the first
handshake, with an error that names neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from boltmq.kernel.config import ConfigError, ServerSettings

PEM_FILE_MAX_BYTES = 1024 * 1024
"""Largest PEM file read (a CA bundle of a few hundred certificates fits)."""


class TLSFileError(ConfigError):
    """A TLS setting names a file that is missing, unreadable or not the PEM expected."""


def _read(setting: str, path: str) -> bytes:
    try:
        with open(Path(path).expanduser(), "rb") as file:
            data = file.read(PEM_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise TLSFileError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if len(data) > PEM_FILE_MAX_BYTES:
        raise TLSFileError(f"{setting}: {path} is larger than {PEM_FILE_MAX_BYTES} bytes")
    return data


def read_certificates(setting: str, path: str) -> bytes:
    """The PEM bytes of ``path``, checked to hold at least one X.509 certificate."""
    data = _read(setting, path)
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TLSFileError(f"{setting}: {path} holds no PEM certificate") from None
    return data


def read_private_key(setting: str, path: str) -> bytes:
    """The PEM bytes of ``path``, checked to be an unencrypted private key."""
    data = _read(setting, path)
    try:
        serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        reason = "is encrypted" if isinstance(exc, TypeError) else "holds no PEM private key"
        raise TLSFileError(f"{setting}: {path} {reason}") from None
    return data


@dataclass(frozen=True)
class ServerTLS:
    """What a TLS server presents, and whom it accepts."""

    cert_chain: bytes
    """PEM certificate chain."""
    private_key: bytes
    """PEM private key of the chain's first certificate."""
    client_ca: bytes | None = None
    """PEM CA bundle; when set, clients without a certificate it signed are refused."""

    def credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials (client certificates required when ``client_ca`` is set)."""
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


@dataclass(frozen=True)
class ClientTLS:
    """What a TLS client trusts, and the certificate it presents (mutual TLS)."""

    root_ca: bytes
    """PEM CA bundle the server's certificate must chain to."""
    cert_chain: bytes | None = None
    """PEM client certificate chain (None: no client certificate)."""
    private_key: bytes | None = None
    """PEM private key of ``cert_chain``."""

    @classmethod
    def from_files(
        cls, ca_file: str, cert_file: str = "", key_file: str = "", *, prefix: str = "tls_"
    ) -> ClientTLS:
        """Read and check the files; ``prefix`` names the settings in errors."""
        if bool(cert_file) != bool(key_file):
            raise ConfigError(
                f"{prefix}client_cert_file and {prefix}client_key_file must be set together"
            )
        if not ca_file:
            raise ConfigError(f"{prefix}ca_file is needed for TLS calls")
        return cls(
            read_certificates(f"{prefix}ca_file", ca_file),
            read_certificates(f"{prefix}client_cert_file", cert_file) if cert_file else None,
            read_private_key(f"{prefix}client_key_file", key_file) if key_file else None,
        )

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials."""
        return grpc.ssl_channel_credentials(self.root_ca, self.private_key, self.cert_chain)


def shared_keys(first_pem: bytes, second_pem: bytes) -> bool:
    """Whether two PEM bundles hold a certificate of the same key (the same CA, perhaps
    re-issued)."""

    def keys(pem: bytes) -> set[bytes]:
        return {
            c.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            for c in x509.load_pem_x509_certificates(pem)
        }

    return not keys(first_pem).isdisjoint(keys(second_pem))


def server_tls(settings: ServerSettings) -> ServerTLS | None:
    """The server side of ``settings`` (None: plaintext); TLSFileError on a bad file."""
    if not settings.tls_cert_file:
        return None
    trusted = [
        read_certificates(name, path)
        for name in ("tls_client_ca_file", "tls_internal_ca_file")
        if (path := getattr(settings, name))
    ]
    if len(trusted) == 2 and shared_keys(*trusted):
        raise ConfigError(
            f"tls_internal_ca_file: {settings.tls_internal_ca_file} shares a CA with "
            f"tls_client_ca_file {settings.tls_client_ca_file}: the internal CA must issue "
            "component certificates only, or an application's certificate passes as a component's"
        )
    return ServerTLS(
        read_certificates("tls_cert_file", settings.tls_cert_file),
        read_private_key("tls_key_file", settings.tls_key_file),
        b"\n".join(trusted) if trusted else None,
    )


def client_tls(settings: ServerSettings) -> ClientTLS | None:
    """The client side of ``settings`` for a service's own calls (None: plaintext)."""
    if not settings.tls_ca_file:
        if settings.tls_client_cert_file:
            raise ConfigError("tls_client_cert_file needs tls_ca_file (TLS calls)")
        return None
    return ClientTLS.from_files(
        settings.tls_ca_file, settings.tls_client_cert_file, settings.tls_client_key_file
    )
