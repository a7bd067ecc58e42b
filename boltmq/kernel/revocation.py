"""Revocations: component certificates the internal CA has withdrawn, from its CRL file.

gRPC's Python TLS checks a peer's chain but reads no certificate revocation
list, so a component certificate that leaked (a node lost, a key copied) would
pass until it expires. The ``tls_internal_crl_file`` setting names a file of
one or more PEM CRLs (``-----BEGIN X509 CRL-----``) that the internal CA
signed; :class:`~boltmq.kernel.peer_identity.IdentityReader` refuses every
certificate whose serial number one of them lists, on every internal port.

File rules:

- every CRL in the file must be signed by a certificate of the internal CA
  bundle (``tls_internal_ca_file``): a CRL of another issuer, or a file with
  no CRL at all, is a configuration error at start;
- the file is read again when its modification time or size changes, checked
  at most once every :data:`RELOAD_CHECK_S` (one ``stat`` a second whatever
  the call rate), so a revocation takes effect within a second of the new CRL
  being written; write the new file beside the old one and rename it over;
- a reload that fails (unreadable, no CRL, a CRL the CA did not sign) keeps the
  revocations already loaded and logs an ERROR each time: a broken update
  never lets a revoked certificate back in;
- ``next_update`` is not enforced: an old CRL still revokes what it lists.

Rotation without revocation needs no CRL: issue the new certificate from the
same internal CA, replace the component's files and restart it
(docs/security.md, "Issuing and rotating identities").
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography import x509

from boltmq.kernel.config import ConfigError

log = logging.getLogger(__name__)

RELOAD_CHECK_S = 1.0
"""How often, at most, the CRL file's modification time is looked at."""
PEM_CRL = re.compile(rb"-----BEGIN X509 CRL-----.+?-----END X509 CRL-----", re.DOTALL)
"""One PEM CRL block of the file."""


class CrlError(ConfigError):
    """A CRL file that cannot be used; the message names the file and why."""


def load_revoked_serials(path: str, issuers: Sequence[x509.Certificate]) -> frozenset[int]:
    """Serial numbers revoked by the CRLs in ``path``; CrlError unless ``issuers`` signed each."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CrlError(f"tls_internal_crl_file: cannot read {path}: {exc.strerror}") from None
    try:
        crls = [x509.load_pem_x509_crl(block) for block in PEM_CRL.findall(data)]
    except ValueError:
        raise CrlError(f"tls_internal_crl_file: {path} holds a CRL that does not parse") from None
    if not crls:
        raise CrlError(f"tls_internal_crl_file: {path} holds no PEM CRL")
    serials: set[int] = set()
    for index, crl in enumerate(crls):
        if not any(_signed_by(crl, issuer) for issuer in issuers):
            raise CrlError(
                f"tls_internal_crl_file: {path}: CRL {index} ({crl.issuer.rfc4514_string()}) "
                "is not signed by the internal CA"
            )
        serials.update(entry.serial_number for entry in crl)
    return frozenset(serials)


def _signed_by(crl: x509.CertificateRevocationList, issuer: x509.Certificate) -> bool:
    if crl.issuer != issuer.subject:
        return False
    try:
        return crl.is_signature_valid(issuer.public_key())  # type: ignore[arg-type]
    except TypeError:  # a key type a CRL cannot be checked with
        return False


class Revocations:
    """The revoked serials of one CRL file, read again when the file changes."""

    def __init__(
        self,
        path: str,
        issuers: Sequence[x509.Certificate],
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._issuers = list(issuers)
        self._clock_s = clock_s
        self._stamp = self._file_stamp()
        self.serials = load_revoked_serials(path, self._issuers)
        """Serial numbers revoked now."""
        self._next_check_s = clock_s() + RELOAD_CHECK_S

    def refresh(self) -> bool:
        """Read the file again if it changed (at most one look a second); True when the
        revoked serials changed, so verdicts kept for certificates must be dropped."""
        now = self._clock_s()
        if now < self._next_check_s:
            return False
        self._next_check_s = now + RELOAD_CHECK_S
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            serials = load_revoked_serials(self.path, self._issuers)
        except CrlError as exc:
            log.error("%s; the %d revocations loaded before stay", exc, len(self.serials))
            return False
        changed = serials != self.serials
        if changed:
            log.warning(
                "tls_internal_crl_file %s reloaded: %d certificates revoked (were %d)",
                self.path,
                len(serials),
                len(self.serials),
            )
        self.serials = serials
        return changed

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size
