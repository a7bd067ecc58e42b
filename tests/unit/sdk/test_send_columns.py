"""A batch of plain messages encoded as columns against each message encoded alone.

``batch_records`` encodes a batch of 16 or more messages of one topic and tags,
with bytes bodies and nothing else, as columns (:mod:`boltmq.wire.send_columns`).
Whatever the batch, the bytes must be those of each message's ``record_parts``
joined, and a batch the columns do not take must still be encoded (or refused)
exactly as before.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.message import Message, MessageError, batch_records, message_unique_ids
from boltmq.wire.record import decode_records
from boltmq.wire.send_columns import COLUMNS_MIN, encode_plain_batch

BORN_MS = 1_767_225_600_123


def one_by_one(
    msgs: list[Message], unique_ids: list[str], compress_over: int = 0, context: dict | None = None
) -> bytes:
    return b"".join(
        b"".join(m.record_parts(BORN_MS, context, unique_id, compress_over))
        for m, unique_id in zip(msgs, unique_ids, strict=True)
    )


TAGS = st.none() | st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(
    count=st.integers(COLUMNS_MIN, 70),
    topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True),
    tags=TAGS,
    data=st.data(),
)
def test_a_plain_batch_is_the_bytes_of_each_message_alone(
    count: int, topic: str, tags: str | None, data: st.DataObject
) -> None:
    bodies = data.draw(st.lists(st.binary(max_size=3000), min_size=count, max_size=count))
    flags = data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=count, max_size=count))
    msgs = [
        Message(topic=topic, body=body, tags=tags, flag=flag)
        for body, flag in zip(bodies, flags, strict=True)
    ]
    unique_ids = message_unique_ids(msgs)
    encoded = batch_records(msgs, BORN_MS, {}, unique_ids)
    assert encoded == one_by_one(msgs, unique_ids)
    views = decode_records(encoded)
    assert [v.body for v in views] == bodies
    assert [v.properties["UNIQ_KEY"] for v in views] == unique_ids


def _plain(count: int = COLUMNS_MIN, **fields: object) -> list[Message]:
    return [Message(topic="Orders", body=b"%d" % n, **fields) for n in range(count)]


@pytest.mark.parametrize(
    "batch",
    [
        _plain()[:-1] + [Message(topic="Other", body=b"x")],  # two topics
        _plain()[:-1] + [Message(topic="Orders", body=b"x", tags="B")],  # two tags
        _plain()[:-1] + [Message(topic="Orders", body=b"x", keys=["k"])],
        _plain()[:-1] + [Message(topic="Orders", body=b"x", properties={"p": "v"})],
        _plain()[:-1] + [Message(topic="Orders", body=bytearray(b"x"))],
        _plain()[:-1] + [Message(topic="Orders", body=b"x", delay_level=3)],
        _plain(tags="A"),
        _plain(COLUMNS_MIN - 1),
    ],
)
def test_batches_the_columns_do_not_take_are_encoded_as_before(batch: list[Message]) -> None:
    unique_ids = message_unique_ids(batch)
    assert batch_records(batch, BORN_MS, {}, unique_ids) == one_by_one(batch, unique_ids)


def test_odd_ids_a_trace_context_or_compression_are_encoded_as_before() -> None:
    msgs = _plain(COLUMNS_MIN)
    uneven = message_unique_ids(msgs)
    uneven[3] = "SHORT"
    assert batch_records(msgs, BORN_MS, {}, uneven) == one_by_one(msgs, uneven)
    unique_ids = message_unique_ids(msgs)
    context = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert batch_records(msgs, BORN_MS, context, unique_ids) == one_by_one(
        msgs, unique_ids, context=context
    )
    long = [Message(topic="Orders", body=bytes(5000)) for _ in range(COLUMNS_MIN)]
    long_ids = message_unique_ids(long)
    assert batch_records(long, BORN_MS, {}, long_ids, compress_over=4096) == one_by_one(
        long, long_ids, compress_over=4096
    )


def test_what_no_store_takes_is_still_refused_naming_the_message() -> None:
    flagged = _plain()
    flagged[5] = Message(topic="Orders", body=b"x", flag=2**31)
    with pytest.raises(MessageError, match="flag"):
        batch_records(flagged, BORN_MS, {}, message_unique_ids(flagged))
    for bad in (
        [Message(topic="T" * 70_000, body=b"x") for _ in range(COLUMNS_MIN)],  # too long
        [Message(topic="\ud800", body=b"x") for _ in range(COLUMNS_MIN)],  # not UTF-8
        _plain(tags="a\x01b"),  # a separator in the tags
    ):
        unique_ids = message_unique_ids(bad)
        with pytest.raises(MessageError) as alone:
            one_by_one(bad, unique_ids)
        with pytest.raises(MessageError) as together:
            batch_records(bad, BORN_MS, {}, unique_ids)
        assert str(together.value) == str(alone.value)


def test_the_encoder_declines_what_it_cannot_encode() -> None:
    bodies, flags = [b"a", b"b"], [0, 0]
    assert encode_plain_batch("T", None, bodies, flags, 0, ["A" * 32, "B" * 31]) is None
    assert encode_plain_batch("T", None, bodies, flags, 0, ["A\x01" * 16, "B" * 32]) is None
    assert encode_plain_batch("T", None, bodies, flags, 0, ["\u00e9" * 32, "B" * 32]) is None
    assert encode_plain_batch("T", None, bodies, [0, 2**40], 0, ["A" * 32, "B" * 32]) is None
    assert encode_plain_batch("T", None, bodies, flags, 0, ["A" * 32]) is None
    assert encode_plain_batch("T", None, [], [], 0, []) is None
