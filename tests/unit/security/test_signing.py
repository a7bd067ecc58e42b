"""Signing a call and reading its signature back (boltmq.kernel.signing)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from boltmq.kernel.signing import (
    ACCESS_KEY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Credentials,
    SignedCall,
    SigningError,
    signed_metadata,
)

METHOD = "/boltmq.v1.BrokerService/SendMessage"


def test_signature_is_the_documented_hmac_over_method_timestamp_and_client() -> None:
    creds = Credentials("orders-app", "s3cret-key", "HmacSHA1")
    metadata = dict(signed_metadata(creds, METHOD, "host@1@ab", timestamp_ms=1_700_000_000_000))
    expected = base64.b64encode(
        hmac.new(
            b"s3cret-key", f"{METHOD}\n1700000000000\nhost@1@ab".encode(), hashlib.sha1
        ).digest()
    )
    assert metadata[SIGNATURE_HEADER] == expected.decode()
    assert metadata[ACCESS_KEY_HEADER] == "orders-app"
    assert "s3cret-key" not in metadata.values()


@pytest.mark.parametrize("algorithm", ["HmacSHA1", "HmacSHA256"])
def test_a_signed_call_matches_its_secret_and_method_only(algorithm: str) -> None:
    creds = Credentials("orders-app", "s3cret-key", algorithm)
    call = SignedCall.from_metadata(signed_metadata(creds, METHOD, "client-1"))
    assert call is not None and call.access_key == "orders-app"
    assert call.matches("s3cret-key", METHOD)
    assert not call.matches("other-secret", METHOD)
    assert not call.matches("s3cret-key", "/boltmq.v1.BrokerService/DeleteTopic")


def test_metadata_without_access_key_is_not_a_signed_call() -> None:
    assert SignedCall.from_metadata([("x-other", "1")]) is None
    assert SignedCall.from_metadata(None) is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({TIMESTAMP_HEADER: "soon"}, "milliseconds"),
        ({TIMESTAMP_HEADER: "1" * 16}, "milliseconds"),
        ({SIGNATURE_HEADER: ""}, "without x-boltmq-signature"),
        ({"x-boltmq-signature-method": "MD5"}, "HmacSHA1"),
        ({"x-boltmq-client-id": "has space"}, "printable"),
        ({ACCESS_KEY_HEADER: "a b"}, "access key"),
    ],
)
def test_malformed_signed_metadata_is_named(change: dict[str, str], message: str) -> None:
    metadata = dict(signed_metadata(Credentials("orders-app", "s3cret-key"), METHOD, "c-1"))
    metadata.update(change)
    with pytest.raises(SigningError, match=message):
        SignedCall.from_metadata(list(metadata.items()))


@pytest.mark.parametrize(
    "access_key, secret_key, algorithm",
    [
        ("short", "s3cret-key", "HmacSHA256"),
        ("with space", "s3cret-key", "HmacSHA256"),
        ("orders-app", "tiny", "HmacSHA256"),
        ("orders-app", "has space in it", "HmacSHA256"),
        ("orders-app", "s3cret-key", "HmacMD5"),
        ("orders-app\n", "s3cret-key", "HmacSHA256"),
        ("orders-app", "s3cret-key\n", "HmacSHA256"),
    ],
)
def test_bad_credentials_are_refused(access_key: str, secret_key: str, algorithm: str) -> None:
    with pytest.raises(SigningError):
        Credentials(access_key, secret_key, algorithm)


def test_credentials_repr_hides_the_secret() -> None:
    assert "s3cret-key" not in repr(Credentials("orders-app", "s3cret-key"))
