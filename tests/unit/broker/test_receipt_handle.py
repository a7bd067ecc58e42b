"""Receipt handles: they round-trip, and every alteration, forgery or misuse is refused."""

from __future__ import annotations

import base64

import pytest

from services.broker.errors import InvalidArgument, ReceiptHandleInvalid
from services.broker.pop import receipt_handle
from services.broker.pop.receipt_handle import HANDLE_MAX_CHARS, HANDLE_SIZE, ReceiptHandle

SECRET = bytes(range(32))
HANDLE = ReceiptHandle(
    queue_id=3,
    queue_offset=1234,
    commitlog_offset=987654321,
    token=(1 << 62) + 5,
    visible_at_ms=1_700_000_030_000,
)


def issued() -> str:
    return receipt_handle.encode(SECRET, "broker-a", "G", "Orders", HANDLE)


def decode(text: str, **scope: str) -> ReceiptHandle:
    where = {"broker_name": "broker-a", "group": "G", "topic": "Orders", **scope}
    return receipt_handle.decode(
        SECRET, where["broker_name"], where["group"], where["topic"], text, "receipt_handle"
    )


def test_a_handle_round_trips_and_is_url_safe_text() -> None:
    text = issued()
    assert decode(text) == HANDLE
    assert text.isascii() and "=" not in text and "/" not in text and "+" not in text
    assert len(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))) == HANDLE_SIZE
    assert receipt_handle.visible_at_ms(text) == HANDLE.visible_at_ms


@pytest.mark.parametrize(
    "scope",
    [{"group": "G2"}, {"topic": "Payments"}, {"broker_name": "broker-b"}],
    ids=["other group", "other topic", "other broker"],
)
def test_a_handle_is_good_only_for_the_group_topic_and_broker_it_was_issued_for(
    scope: dict[str, str],
) -> None:
    with pytest.raises(ReceiptHandleInvalid, match="not a receipt handle this broker issued"):
        decode(issued(), **scope)


def test_a_handle_signed_with_another_secret_is_refused() -> None:
    forged = receipt_handle.encode(bytes(32), "broker-a", "G", "Orders", HANDLE)
    with pytest.raises(ReceiptHandleInvalid, match="forged"):
        decode(forged)


def test_every_altered_byte_is_refused() -> None:
    raw = bytearray(base64.urlsafe_b64decode(issued() + "=" * (-len(issued()) % 4)))
    for index in range(len(raw)):
        altered = bytearray(raw)
        altered[index] ^= 0x01
        text = base64.urlsafe_b64encode(bytes(altered)).rstrip(b"=").decode()
        with pytest.raises(ReceiptHandleInvalid):
            decode(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "must not be empty"),
        ("not base64 !!", "not base64"),
        ("QUJD", "wrong size or version"),
        ("x" * (HANDLE_MAX_CHARS + 1), "malformed"),
        ("é" * 10, "malformed"),
    ],
)
def test_malformed_handles_are_refused_naming_the_field(text: str, why: str) -> None:
    with pytest.raises(ReceiptHandleInvalid, match=why) as info:
        decode(text)
    assert str(info.value).startswith("receipt_handle: ")
    assert isinstance(info.value, InvalidArgument)


def test_a_handle_of_another_version_is_refused() -> None:
    raw = bytearray(base64.urlsafe_b64decode(issued() + "=" * (-len(issued()) % 4)))
    raw[0] = 2
    with pytest.raises(ReceiptHandleInvalid, match="version"):
        decode(base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode())
