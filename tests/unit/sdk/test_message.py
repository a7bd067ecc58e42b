"""The SDK's message encoding: what ``Producer`` sends is one CommitLog record per message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boltmq.message import Message, MessageError, batch_records
from boltmq.wire.record import decode_record
from boltmq.wire.record_batch import encode_send_record


def test_to_record_carries_every_field_a_consumer_sees() -> None:
    msg = Message(topic="T", body=b"hi", tags="A", keys=["k1"], properties={"p": "v"}, flag=3)
    view = decode_record(memoryview(msg.to_record(born_timestamp_ms=42)), 0, check_crc=True)
    assert (
        view.topic,
        bytes(view.body),
        view.tags,
        view.keys,
        view.properties["p"],
        view.flag,
        view.born_timestamp,
    ) == ("T", b"hi", "A", ["k1"], "v", 3, 42)


@pytest.mark.parametrize(
    "msg, reason",
    [
        (Message(topic="", body=b"x"), "topic"),
        (Message(topic="T", body="text"), "body must be bytes"),  # type: ignore[arg-type]
        (Message(topic="T", body=b"x", keys="k"), "keys"),
        (Message(topic="T", body=b"x", keys=["a b"]), "key"),
        (Message(topic="T", body=b"x", keys=[7]), "T"),  # type: ignore[list-item]
        (Message(topic="T", body=b"x", properties={"a": "b\x02"}), "separator"),
        (Message(topic="T", body=b"x", properties={"a": "v" * 40_000}), "32767"),
        (Message(topic="T", body=b"x", flag=1 << 40), "flag"),
        (Message(topic="\ud800", body=b"x"), "topic is not valid text: surrogates"),
        (Message(topic="T", body=b"x", tags="\udfff"), "properties is not valid text"),
        (Message(topic="T", body=b"x", properties={"k": "\ud800"}), "not valid text"),
    ],
)
def test_to_record_refuses_what_no_store_accepts_with_a_message_error(
    msg: Message, reason: str
) -> None:
    with pytest.raises(MessageError, match=reason):
        msg.to_record()
    with pytest.raises(MessageError, match=reason):  # in a batch, behind a good message
        batch_records([Message(topic="T", body=b"ok"), msg])


@pytest.mark.parametrize(
    "msg, reason",
    [
        (Message(topic="T", body=b"x", delay_level=-1), "delay_level must be a non-negative int"),
        (Message(topic="T", body=b"x", deliver_at_ms=1.5), "deliver_at_ms must be"),  # type: ignore[arg-type]
        (Message(topic="T", body=b"x", delay_level=2, deliver_at_ms=5), "not both"),
        (Message(topic="T", body=b"x", delay_level=19), "is not 1..18"),
        (Message(topic="T", body=b"x", delay_level=False), "delay_level must be"),  # type: ignore[arg-type]
        (Message(topic="T", body=b"x", deliver_at_ms=0.0), "deliver_at_ms must be"),  # type: ignore[arg-type]
        (Message(topic="T", body=b"x", keys=""), "keys must be a list"),
    ],
)
def test_delay_settings_are_checked_before_encoding(msg: Message, reason: str) -> None:
    with pytest.raises(MessageError, match=reason):
        msg.to_record()
    with pytest.raises(MessageError, match=reason):  # in a batch, behind a good message
        batch_records([Message(topic="T", body=b"ok"), msg])


def test_a_batch_is_its_messages_records_back_to_back() -> None:
    # Mixed tags, keys, delays, and one body given as a memoryview.
    msgs = [
        Message(
            topic="T",
            body=memoryview(bytes([i]) * (i + 1)) if i == 5 else bytes([i]) * (i + 1),
            tags="A" if i % 2 else None,
            keys=[f"k{i}"] if i % 3 == 0 else [],
            delay_level=i % 4,
        )
        for i in range(12)
    ]
    context = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    assert batch_records(msgs, 42, context) == b"".join(m.to_record(42, context) for m in msgs)
    assert batch_records([]) == b""


@given(
    st.lists(
        st.builds(
            Message,
            topic=st.sampled_from(["T", "topic-%d", "Ünïcode"]),
            body=st.binary(max_size=64) | st.binary(max_size=64).map(bytearray),
            tags=st.none() | st.sampled_from(["", "A", "tag b"]),
            keys=st.just(()) | st.lists(st.sampled_from(["k1", "k2"]), max_size=2),
            properties=st.just({})
            | st.dictionaries(st.sampled_from(["p", "q"]), st.text("abc", max_size=4), max_size=2),
            flag=st.integers(-(2**31), 2**31 - 1),
            delay_level=st.integers(0, 18),
        ),
        max_size=8,
    ),
    st.integers(0, 2**41),
)
def test_a_batch_without_trace_context_is_its_records_back_to_back(
    msgs: list[Message], born_ms: int
) -> None:
    # Plain messages take record_parts' shortcut; the reference is the store's own
    # encoder given each message's fields (DELAY as the broker reads it).
    expected = b"".join(
        encode_send_record(
            m.topic,
            bytes(m.body),
            m.tags or None,
            m.keys,
            {**m.properties, **({"DELAY": str(m.delay_level)} if m.delay_level else {})},
            m.flag,
            born_ms,
        )
        for m in msgs
    )
    assert batch_records(msgs, born_ms) == expected
    assert b"".join(m.to_record(born_ms) for m in msgs) == expected


def test_a_bad_message_fails_the_whole_batch_naming_it() -> None:
    msgs = [Message(topic="T", body=b"ok"), Message(topic="T", body=b"x", keys=["a b"])]
    with pytest.raises(MessageError, match="key"):
        batch_records(msgs)
