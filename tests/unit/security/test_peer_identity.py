"""Component identities: the ``boltmq://`` URI, certificates, and who issued them."""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.kernel.peer_identity import (
    IdentityError,
    IdentityReader,
    PeerIdentity,
    own_identity,
    parse_identity_uri,
)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return dev_certificates.generate(tmp_path_factory.mktemp("tls"), groups=("broker-a", "b_2"))


@pytest.mark.parametrize(
    ("uri", "identity"),
    [
        ("boltmq://broker-a/broker", PeerIdentity("broker-a", "broker")),
        ("boltmq://broker-a/ha", PeerIdentity("broker-a", "ha")),
        ("BOLTMQ://g.1_x/store", PeerIdentity("g.1_x", "store")),
        ("boltmq:///registry", PeerIdentity("", "registry")),
    ],
)
def test_valid_identity_uris_parse(uri: str, identity: PeerIdentity) -> None:
    assert parse_identity_uri(uri) == identity
    assert parse_identity_uri(identity.uri) == identity


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("boltmq://broker-a/admin", "unknown role"),
        ("boltmq://broker-a/Broker", "not boltmq://"),
        ("boltmq://broker-a/broker/extra", "not boltmq://"),
        ("boltmq://broker-a", "not boltmq://"),
        ("boltmq:///broker", "no valid broker group"),
        ("boltmq://bad group/broker", "no valid broker group"),
        ("boltmq://" + "g" * 128 + "/broker", "no valid broker group"),
        ("boltmq://broker-a/registry", "names none"),
        ("https://broker-a/broker", "not boltmq://"),
    ],
)
def test_malformed_identity_uris_are_refused(uri: str, reason: str) -> None:
    with pytest.raises(IdentityError, match=reason):
        parse_identity_uri(uri)


def test_component_certificates_carry_their_identity(certificates: DevCertificates) -> None:
    reader = IdentityReader(certificates.ca_file.read_bytes())
    for role in ("broker", "ha", "store"):
        for group in ("broker-a", "b_2"):
            pem = certificates.component_files(role, group)[0].read_bytes()
            assert reader.of_certificate(pem) == PeerIdentity(group, role)
            assert own_identity(pem) == PeerIdentity(group, role)
    registry = certificates.component_files("registry")[0].read_bytes()
    assert reader.of_certificate(registry) == PeerIdentity("", "registry")


def test_application_certificates_have_no_identity(certificates: DevCertificates) -> None:
    reader = IdentityReader(certificates.ca_file.read_bytes())
    with pytest.raises(IdentityError, match="not issued by the internal CA"):
        reader.of_certificate(certificates.client_cert_file.read_bytes())
    # Even trusting the application CA as internal, its certificate names no component.
    lenient = IdentityReader(certificates.app_ca_file.read_bytes())
    with pytest.raises(IdentityError, match="no subject alternative names"):
        lenient.of_certificate(certificates.client_cert_file.read_bytes())
    with pytest.raises(IdentityError, match="not issued by the internal CA"):  # twice: cached
        reader.of_certificate(certificates.client_cert_file.read_bytes())


def test_a_certificate_of_another_internal_ca_has_no_identity(
    certificates: DevCertificates, tmp_path: Path
) -> None:
    other = dev_certificates.generate(tmp_path / "other")
    reader = IdentityReader(certificates.ca_file.read_bytes())
    forged = other.component_files("broker", "broker-a")[0].read_bytes()
    assert own_identity(forged) == PeerIdentity("broker-a", "broker")  # it names one...
    with pytest.raises(IdentityError, match="not issued by the internal CA"):
        reader.of_certificate(forged)  # ...that nobody believes
    both = IdentityReader(certificates.ca_file.read_bytes() + other.ca_file.read_bytes())
    assert both.of_certificate(forged) == PeerIdentity("broker-a", "broker")  # a CA bundle


def test_garbage_is_no_certificate(certificates: DevCertificates) -> None:
    reader = IdentityReader(certificates.ca_file.read_bytes())
    with pytest.raises(IdentityError, match="does not parse"):
        reader.of_certificate(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
