"""PeerIdentity: which cluster component a TLS peer is, read from its certificate.

Component certificates are issued by the cluster's **internal CA** (the
``tls_internal_ca_file`` setting), never by the CA that issues applications'
certificates, and name the component in one URI subject alternative name:

    boltmq://<broker-group>/<role>

Part         | Meaning
-------------+-------------------------------------------------------------------
scheme       | ``boltmq`` (case-insensitive)
broker-group | the broker group (``broker_name``) the component serves: 1-127
             | characters of ``A-Z a-z 0-9 _ . -``; empty for a registry, which
             | serves every group (``boltmq:///registry``)
role         | ``broker``, ``ha``, ``store`` or ``registry``

e.g. ``boltmq://broker-a/broker``, ``boltmq://broker-a/ha``,
``boltmq://broker-a/store``. A certificate with no ``boltmq`` URI, with two,
or with one that does not parse has no identity. A certificate signed by any
other CA has none either, whatever it names: the TLS handshake may trust
several CAs (the registry's port trusts applications' too), so
:class:`IdentityReader` checks the leaf's signature against the internal CA
itself. That check costs a signature verification, so its outcome is kept
per certificate (:data:`IDENTITY_CACHE_MAX` of them): a call costs a dict
look-up once its peer's certificate was seen. A certificate whose serial the
internal CA's revocation list names has no identity either
(:mod:`boltmq.kernel.revocation`); a changed list drops every kept outcome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from boltmq.kernel.revocation import Revocations

ROLES: Final = ("broker", "ha", "store", "registry")
"""Every component role a certificate may name."""
URI_SCHEME: Final = "boltmq"
GROUP_PATTERN: Final = re.compile(r"[A-Za-z0-9_.\-]{1,127}")
URI_PATTERN: Final = re.compile(r"(?i:boltmq)://([^/]*)/([a-z]+)")
PEM_CERT_PROPERTY: Final = "x509_pem_cert"
"""The gRPC auth-context property holding the peer's leaf certificate (PEM)."""
IDENTITY_CACHE_MAX: Final = 4096
"""Certificates whose verdict is kept; past it the cache starts over (a cluster has few)."""


class IdentityError(Exception):
    """A peer has no component identity; the message says why."""


@dataclass(frozen=True)
class PeerIdentity:
    """A component: its broker group ("" for a registry) and role."""

    group: str
    role: str

    @property
    def uri(self) -> str:
        """``boltmq://<group>/<role>``."""
        return f"{URI_SCHEME}://{self.group}/{self.role}"

    def __str__(self) -> str:
        return self.uri


def parse_identity_uri(uri: str) -> PeerIdentity:
    """The identity ``uri`` names; IdentityError when it is not a valid ``boltmq`` URI."""
    match = URI_PATTERN.fullmatch(uri)
    if match is None:
        raise IdentityError(f"{uri!r} is not boltmq://<broker-group>/<role>")
    group, role = match.groups()
    if role not in ROLES:
        raise IdentityError(f"{uri!r} names an unknown role (one of {', '.join(ROLES)})")
    if role == "registry" and group:
        raise IdentityError(f"{uri!r}: a registry serves every group and names none")
    if role != "registry" and not GROUP_PATTERN.fullmatch(group):
        raise IdentityError(f"{uri!r} names no valid broker group")
    return PeerIdentity(group, role)


def certificate_identity(certificate: x509.Certificate) -> PeerIdentity:
    """The identity the certificate's ``boltmq`` URI SAN names (its issuer is not checked)."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise IdentityError("the certificate has no subject alternative names") from None
    uris = [
        uri
        for uri in names.get_values_for_type(x509.UniformResourceIdentifier)
        if uri.lower().startswith(f"{URI_SCHEME}:")
    ]
    if not uris:
        raise IdentityError("the certificate names no boltmq:// identity")
    if len(uris) > 1:
        raise IdentityError(f"the certificate names {len(uris)} boltmq:// identities")
    return parse_identity_uri(uris[0])


def own_identity(cert_chain_pem: bytes) -> PeerIdentity:
    """The identity of a service's own certificate (the first of its PEM chain)."""
    return certificate_identity(x509.load_pem_x509_certificates(cert_chain_pem)[0])


class IdentityReader:
    """Identities of callers, believed only from certificates the internal CA issued."""

    def __init__(self, internal_ca_pem: bytes, crl_file: str = "") -> None:
        self._issuers = x509.load_pem_x509_certificates(internal_ca_pem)
        self._verdicts: dict[bytes, PeerIdentity | str] = {}
        self._revocations = Revocations(crl_file, self._issuers) if crl_file else None

    def of_certificate(self, pem: bytes) -> PeerIdentity:
        """The identity of the PEM leaf certificate ``pem``; IdentityError when it has none."""
        if self._revocations is not None and self._revocations.refresh():
            self._verdicts.clear()
        verdict = self._verdicts.get(pem)
        if verdict is None:
            verdict = self._judge(pem)
            if len(self._verdicts) >= IDENTITY_CACHE_MAX:
                self._verdicts.clear()
            self._verdicts[pem] = verdict
        if isinstance(verdict, str):
            raise IdentityError(verdict)
        return verdict

    def of_caller(self, context: grpc.aio.ServicerContext) -> PeerIdentity:
        """The identity of the call's TLS peer; IdentityError without one."""
        certificates = context.auth_context().get(PEM_CERT_PROPERTY)
        if not certificates:
            raise IdentityError("the caller presented no client certificate")
        return self.of_certificate(certificates[0])

    def _judge(self, pem: bytes) -> PeerIdentity | str:
        try:
            certificate = x509.load_pem_x509_certificate(pem)
        except ValueError:
            return "the client certificate does not parse"
        if not any(self._issued_by(certificate, issuer) for issuer in self._issuers):
            return "the client certificate was not issued by the internal CA"
        revoked = self._revocations.serials if self._revocations is not None else ()
        if certificate.serial_number in revoked:
            return (
                f"the client certificate (serial {certificate.serial_number:x}) is revoked "
                "by the internal CA's CRL"
            )
        try:
            return certificate_identity(certificate)
        except IdentityError as exc:
            return str(exc)

    @staticmethod
    def _issued_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
        try:
            certificate.verify_directly_issued_by(issuer)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True
