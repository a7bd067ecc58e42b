"""Revocations and IdentityReader: a CRL of the internal CA withdraws component certificates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography import x509

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.kernel.config import ConfigError, ServerSettings
from boltmq.kernel.peer_identity import IdentityError, IdentityReader, PeerIdentity
from boltmq.kernel.revocation import RELOAD_CHECK_S, CrlError, Revocations
from tests.revocation_lists import write_crl


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return dev_certificates.generate(tmp_path_factory.mktemp("tls"), keep_internal_ca_key=True)


def issuers(certificates: DevCertificates) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(certificates.ca_file.read_bytes())


def serial(certificates: DevCertificates, role: str) -> int:
    cert_file, _ = certificates.component_files(role, "broker-a")
    return x509.load_pem_x509_certificate(cert_file.read_bytes()).serial_number


def pem(certificates: DevCertificates, role: str) -> bytes:
    return certificates.component_files(role, "broker-a")[0].read_bytes()


def rewrite(certificates: DevCertificates, path: Path, *roles: str) -> None:
    """A new CRL whose file stamp surely differs from the last one's."""
    before = os.stat(path).st_mtime_ns if path.exists() else 0
    write_crl(certificates, path, *roles)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_the_reader_refuses_a_revoked_serial_and_accepts_the_others(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    crl = tmp_path / "crl.pem"
    write_crl(certificates, crl, "ha")
    reader = IdentityReader(certificates.ca_file.read_bytes(), str(crl))
    assert reader.of_certificate(pem(certificates, "broker")) == PeerIdentity("broker-a", "broker")
    with pytest.raises(IdentityError, match="is revoked by the internal CA's CRL"):
        reader.of_certificate(pem(certificates, "ha"))


def test_a_changed_file_is_read_at_most_once_a_check_interval(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    crl, clock = tmp_path / "crl.pem", Clock()
    rewrite(certificates, crl)
    revocations = Revocations(str(crl), issuers(certificates), clock)
    assert revocations.serials == frozenset()
    rewrite(certificates, crl, "broker")
    assert not revocations.refresh() and revocations.serials == frozenset()  # not looked at yet
    clock.now += RELOAD_CHECK_S
    assert revocations.refresh() and revocations.serials == {serial(certificates, "broker")}
    clock.now += RELOAD_CHECK_S
    assert not revocations.refresh()  # unchanged file: nothing to drop


def test_a_broken_update_keeps_the_revocations_loaded(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    crl, clock = tmp_path / "crl.pem", Clock()
    rewrite(certificates, crl, "store")
    revocations = Revocations(str(crl), issuers(certificates), clock)
    crl.write_bytes(b"garbage")
    os.utime(crl, ns=(1, 1))
    clock.now += RELOAD_CHECK_S
    assert not revocations.refresh()
    assert revocations.serials == {serial(certificates, "store")}
    crl.unlink()
    clock.now += RELOAD_CHECK_S
    assert not revocations.refresh() and revocations.serials == {serial(certificates, "store")}


def test_a_crl_of_another_ca_or_none_at_all_is_refused(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    other = dev_certificates.generate(tmp_path / "other", keep_internal_ca_key=True)
    foreign = tmp_path / "foreign.pem"
    write_crl(other, foreign)
    with pytest.raises(CrlError, match="is not signed by the internal CA"):
        Revocations(str(foreign), issuers(certificates))
    (tmp_path / "empty.pem").write_bytes(b"")
    with pytest.raises(CrlError, match="holds no PEM CRL"):
        Revocations(str(tmp_path / "empty.pem"), issuers(certificates))
    with pytest.raises(CrlError, match="cannot read"):
        Revocations(str(tmp_path / "missing.pem"), issuers(certificates))


def test_a_crl_file_needs_the_internal_ca() -> None:
    with pytest.raises(ConfigError, match="tls_internal_crl_file needs tls_internal_ca_file"):
        ServerSettings(tls_cert_file="c", tls_key_file="k", tls_internal_crl_file="crl.pem")
