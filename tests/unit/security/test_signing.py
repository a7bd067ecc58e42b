"""Signing a call and reading its signature back (boltmq.kernel.signing, format 3)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boltmq.kernel.signing import (
    ACCESS_KEY_HEADER,
    ALGORITHM_HEADER,
    CLIENT_ID_HEADER,
    CONTENT_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TARGET_HEADER,
    TIMESTAMP_HEADER,
    Credentials,
    SignedCall,
    SigningError,
    request_bytes,
    signed_metadata,
)
from boltmq.v1 import broker_pb2

METHOD = "/boltmq.v1.BrokerService/SendMessage"
BODY = broker_pb2.SendRequest(producer_group="pg", topic="orders").SerializeToString()
NONCE = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("target", ["broker-a", ""])
def test_signature_is_the_documented_hmac_over_method_time_client_nonce_body_and_target(
    target: str,
) -> None:
    creds = Credentials("orders-app", "s3cret-key", "HmacSHA1")
    metadata = dict(
        signed_metadata(
            creds,
            METHOD,
            "host@1@ab",
            BODY,
            timestamp_ms=1_700_000_000_000,
            nonce=NONCE,
            target=target,
        )
    )
    content = hashlib.sha256(BODY).hexdigest()
    to_sign = f"BOLTMQ3\n{METHOD}\n1700000000000\nhost@1@ab\n{NONCE}\n{content}\n{target}"
    expected = base64.b64encode(hmac.new(b"s3cret-key", to_sign.encode(), hashlib.sha1).digest())
    assert metadata[SIGNATURE_HEADER] == expected.decode()
    assert metadata[CONTENT_HEADER] == content and metadata[NONCE_HEADER] == NONCE
    assert metadata[TARGET_HEADER] == target
    assert metadata[ACCESS_KEY_HEADER] == "orders-app"
    assert "s3cret-key" not in metadata.values()


def test_every_call_gets_a_new_nonce() -> None:
    creds = Credentials("orders-app", "s3cret-key")
    nonces = {dict(signed_metadata(creds, METHOD, "c", BODY))[NONCE_HEADER] for _ in range(200)}
    assert len(nonces) == 200


def test_request_bytes_takes_serialized_requests_as_they_are() -> None:
    request = broker_pb2.SendRequest(producer_group="pg", topic="orders")
    assert request_bytes(request) == BODY == request_bytes(BODY)
    assert request_bytes(bytearray(BODY)) == BODY


@pytest.mark.parametrize("algorithm", ["HmacSHA1", "HmacSHA256"])
def test_a_signed_call_matches_its_secret_method_and_body_only(algorithm: str) -> None:
    creds = Credentials("orders-app", "s3cret-key", algorithm)
    call = SignedCall.from_metadata(signed_metadata(creds, METHOD, "client-1", BODY))
    assert call is not None and call.access_key == "orders-app"
    assert call.matches("s3cret-key", METHOD) and call.covers(BODY)
    assert not call.matches("other-secret", METHOD)
    assert not call.matches("s3cret-key", "/boltmq.v1.BrokerService/DeleteTopic")
    assert not call.covers(BODY + b"\x00") and not call.covers(b"")


@given(st.binary(max_size=512), st.binary(max_size=512), st.sampled_from(["A", "B"]))
def test_a_signature_covers_exactly_its_body(signed: bytes, sent: bytes, method: str) -> None:
    creds = Credentials("orders-app", "s3cret-key")
    call = SignedCall.from_metadata(signed_metadata(creds, f"/s/{method}", "c", signed))
    assert call is not None
    assert call.covers(sent) is (sent == signed)
    assert call.matches("s3cret-key", f"/s/{method}")
    assert not call.matches("s3cret-key", "/s/C")


def test_the_target_is_signed_so_it_can_be_neither_changed_nor_stripped() -> None:
    creds = Credentials("orders-app", "s3cret-key")
    metadata = dict(signed_metadata(creds, METHOD, "c", BODY, target="broker-a"))
    call = SignedCall.from_metadata(list(metadata.items()))
    assert call is not None and call.target == "broker-a" and call.matches("s3cret-key", METHOD)
    for other in ("broker-b", ""):
        changed = SignedCall.from_metadata(list({**metadata, TARGET_HEADER: other}.items()))
        assert changed is not None and changed.target == other
        assert not changed.matches("s3cret-key", METHOD)


def test_a_target_that_is_no_broker_name_is_refused() -> None:
    creds = Credentials("orders-app", "s3cret-key")
    with pytest.raises(SigningError, match="broker name"):
        signed_metadata(creds, METHOD, "c", BODY, target="broker a")


def test_metadata_without_access_key_is_not_a_signed_call() -> None:
    assert SignedCall.from_metadata([("x-other", "1")]) is None
    assert SignedCall.from_metadata(None) is None


def test_the_old_format_is_refused_with_an_upgrade_message() -> None:
    old = {
        ACCESS_KEY_HEADER: "orders-app",
        TIMESTAMP_HEADER: "1700000000000",
        CLIENT_ID_HEADER: "c-1",
        ALGORITHM_HEADER: "HmacSHA256",
        SIGNATURE_HEADER: "c2lnbmF0dXJl",
    }
    with pytest.raises(SigningError, match="old signature format .* upgrade the client"):
        SignedCall.from_metadata(list(old.items()))


def test_format_2_without_a_target_is_refused_with_an_upgrade_message() -> None:
    metadata = dict(signed_metadata(Credentials("orders-app", "s3cret-key"), METHOD, "c", BODY))
    del metadata[TARGET_HEADER]
    with pytest.raises(SigningError, match="target broker unsigned.* upgrade the client"):
        SignedCall.from_metadata(list(metadata.items()))


@pytest.mark.parametrize(
    "change, message",
    [
        ({TIMESTAMP_HEADER: "soon"}, "milliseconds"),
        ({TIMESTAMP_HEADER: "1" * 16}, "milliseconds"),
        ({SIGNATURE_HEADER: ""}, "without x-boltmq-signature"),
        ({NONCE_HEADER: ""}, "without x-boltmq-nonce"),
        ({NONCE_HEADER: "0123"}, "32 lower-case hex"),
        ({NONCE_HEADER: NONCE + "\n"}, "32 lower-case hex"),
        ({CONTENT_HEADER: "AB" * 32}, "64 lower-case hex"),
        ({ALGORITHM_HEADER: "MD5"}, "HmacSHA1"),
        ({CLIENT_ID_HEADER: "has space"}, "printable"),
        ({CLIENT_ID_HEADER: "c-1\n"}, "printable"),
        ({ACCESS_KEY_HEADER: "a b"}, "access key"),
        ({TARGET_HEADER: "broker\na"}, "broker name"),
        ({TARGET_HEADER: "b" * 128}, "broker name"),
    ],
)
def test_malformed_signed_metadata_is_named(change: dict[str, str], message: str) -> None:
    metadata = dict(signed_metadata(Credentials("orders-app", "s3cret-key"), METHOD, "c-1", BODY))
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
