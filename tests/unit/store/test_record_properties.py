"""The record's properties field: ``key\\x01value\\x02`` pairs, their limits and bad bytes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import CorruptRecord, InvalidMessage, decode_properties
from boltmq.wire.record_encoding import encode_properties
from services.store import MessageStore, PutStatus, StoreMessage
from tests.unit.store.record_spec import spec_properties


def test_properties_encoding_is_key_sep_value_sep() -> None:
    assert encode_properties({}) == b""
    assert encode_properties({"a": "1", "KEYS": "k1 k2"}) == b"a\x011\x02KEYS\x01k1 k2\x02"
    assert encode_properties({"é": ""}) == "é\x01\x02".encode()
    assert decode_properties(b"a\x011\x02KEYS\x01k1 k2\x02") == {"a": "1", "KEYS": "k1 k2"}
    assert decode_properties(b"") == {}
    assert decode_properties(b"a\x01x\x01y\x02") == {"a": "x\x01y"}


@pytest.mark.parametrize(
    "properties",
    [
        {"": "v"},
        {"a\x01": "v"},
        {"a": "v\x02"},
        {"a": "v\x01w"},
        {"a": 1},
    ],
)
def test_properties_that_cannot_be_encoded(properties: dict[str, object]) -> None:
    with pytest.raises(InvalidMessage):
        encode_properties(properties)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", [b"novalue\x02", b"a\x011\x02junk", b"\xff\xfe\x01x\x02"])
def test_malformed_properties_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_properties(raw)


_PROPERTY_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_PROPERTY_TEXT.filter(bool), _PROPERTY_TEXT, max_size=8))
def test_properties_round_trip(properties: dict[str, str]) -> None:
    raw = encode_properties(properties)
    assert raw == spec_properties(properties)
    assert decode_properties(raw) == properties


def test_oversized_properties_and_bad_keys_are_refused(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    fits = {"p": "v" * (32767 - len("p\x01\x02"))}
    assert store.put_message(StoreMessage(topic="P", properties=fits)).status == PutStatus.PUT_OK
    too_big = {"p": "v" * (32768 - len("p\x01\x02"))}
    assert (
        store.put_message(StoreMessage(topic="P", properties=too_big)).status
        == PutStatus.PROPERTIES_SIZE_EXCEEDED
    )
    for keys in (["has space"], [""]):
        assert (
            store.put_message(StoreMessage(topic="P", keys=keys)).status
            == PutStatus.MESSAGE_ILLEGAL
        )
    assert store.max_offset("P", 0) == 1
