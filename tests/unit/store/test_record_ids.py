"""Java ``String.hashCode()`` (the tags code) and the MessageId of a stored record.

Hash values are literal constants known from Java, plus the UTF-16 reference in
tests/unit/store/record_spec.py for the property-based check. A MessageId is the
store host's address, its port and the record's CommitLog offset in uppercase hex.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import java_hash, java_string_hash, make_msg_id, parse_msg_id, tags_code
from boltmq.wire.record_encoding import encode_host
from services.store import MessageStore, StoreMessage
from tests.unit.store.record_spec import STORE_PORT, java_hash_reference

INT32_MIN = -(2**31)


# --------------------------------------------------------------------------- java hash


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("abc", 96354),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", INT32_MIN),  # the well-known Integer.MIN_VALUE string
        ("TagA", ((84 * 31 + 97) * 31 + 103) * 31 + 65),
    ],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected
    assert java_hash(text) == expected


def test_java_string_hash_counts_a_surrogate_pair_as_two_units() -> None:
    # U+1F511 is D83D DD11 in UTF-16.
    assert java_string_hash("🔑") == 31 * 0xD83D + 0xDD11
    assert java_string_hash("a🔑") == (97 * 31 + 0xD83D) * 31 + 0xDD11
    assert java_string_hash("\U0001f511") == java_hash_reference("\ud83d\udd11")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_java_string_hash_matches_the_utf16_reference(text: str) -> None:
    h = java_string_hash(text)
    assert h == java_hash_reference(text) == java_hash(text)
    assert INT32_MIN <= h < 2**31
    assert tags_code(text) == (h if text else 0)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=20, max_size=200))
def test_java_hash_of_long_ascii_text_matches_the_reference(text: str) -> None:
    assert java_hash(text) == java_hash_reference(text)


def test_tags_code_is_zero_without_tags() -> None:
    assert tags_code(None) == 0 and tags_code("") == 0


# --------------------------------------------------------------------------- message ids


def test_msg_id_is_store_host_port_and_offset_in_uppercase_hex(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    results = [store.put_message(StoreMessage(topic="Id", body=b"x" * 300)) for _ in range(3)]
    for result in results:
        assert result.msg_id == f"7F000001{STORE_PORT:08X}{result.commitlog_offset:016X}"
        assert result.msg_id == result.msg_id.upper() and len(result.msg_id) == 32
        assert parse_msg_id(result.msg_id) == ("127.0.0.1", STORE_PORT, result.commitlog_offset)
        viewed = store.view_message(result.msg_id)
        assert viewed is not None and viewed.commitlog_offset == result.commitlog_offset
    assert results[2].commitlog_offset > 0


def test_ipv6_msg_id_has_56_characters(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(store_host="fe80::1:2", store_port=7)
    result = store.put_message(StoreMessage(topic="Id6", body=b"x"))
    store.put_message(StoreMessage(topic="Id6", body=b"y"))
    second = store.put_message(StoreMessage(topic="Id6", body=b"z"))
    expected_host = ipaddress.ip_address("fe80::1:2").packed.hex().upper()
    assert second.msg_id == f"{expected_host}00000007{second.commitlog_offset:016X}"
    assert len(result.msg_id) == 56
    assert parse_msg_id(second.msg_id) == ("fe80::1:2", 7, second.commitlog_offset)
    viewed = store.view_message(second.msg_id)
    assert viewed is not None and viewed.body_bytes() == b"z"


@settings(max_examples=200, deadline=None)
@given(
    address=st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)),
    port=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
)
def test_msg_id_round_trips(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int
) -> None:
    msg_id = make_msg_id(encode_host(str(address), port), offset)
    assert len(msg_id) == (32 if address.version == 4 else 56)
    assert msg_id == msg_id.upper()
    assert parse_msg_id(msg_id) == (str(address), port, offset)


VALID_V4_ID = f"7F000001{STORE_PORT:08X}{16:016X}"


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "7F000001",
        VALID_V4_ID[:-1],
        VALID_V4_ID + "0",
        "G" * 32,
        "7F00000100002A9F000000000000001Z",
        "é" * 32,
        "0x" + VALID_V4_ID[2:],
        VALID_V4_ID + " " * 24,  # 56 characters, but only an IPv4 id's worth of hex
        VALID_V4_ID[:8] + " " + VALID_V4_ID[9:],  # 32 characters with a space in them
    ],
)
def test_malformed_msg_ids_raise_value_error(msg_id: str) -> None:
    with pytest.raises(ValueError):
        parse_msg_id(msg_id)


def test_view_message_rejects_a_malformed_id(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    with pytest.raises(ValueError):
        store.view_message("not-an-id")
    assert store.view_message(VALID_V4_ID) is None  # well formed, nothing stored there
