"""PullWire: a Pull answer encoded around its records parses as the PullResponse it stands for."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.pull_answer import (
    PullAnswer,
    QueuesAnswer,
    answer_frame,
    answer_frames,
    encode_pull,
    encode_pull_queues,
    pull_parts,
    split_records,
    varint,
)

# The records length varint's edges: 1 to 4 bytes (a pull is at most 4 MiB).
LENGTH_EDGES = (1, 127, 128, 16_383, 16_384, (1 << 21) - 1, 1 << 21, 4 << 20)


def head(**fields: int) -> store_pb2.PullResponse:
    return store_pb2.PullResponse(
        status=message_pb2.FOUND,
        next_begin_offset=7,
        min_offset=2,
        max_offset=9,
        record_count=3,
        **fields,
    )


def test_varint_is_protobufs_base_128_encoding() -> None:
    assert varint(0) == b"\x00"
    assert varint(1) == b"\x01"
    assert varint(300) == b"\xac\x02"  # the protobuf encoding guide's example
    assert varint((1 << 64) - 1) == b"\xff" * 9 + b"\x01"
    for value in (-1, 1 << 64):
        with pytest.raises(ValueError, match="does not fit a varint"):
            varint(value)


@pytest.mark.parametrize("length", LENGTH_EDGES)
def test_records_of_every_length_width_parse_back(length: int) -> None:
    records = bytes(range(256)) * (length // 256) + b"r" * (length % 256)
    encoded = encode_pull(head(), [records[: length // 2], memoryview(records)[length // 2 :]])
    parsed = store_pb2.PullResponse.FromString(encoded)
    assert parsed.records == records
    assert (
        parsed.status,
        parsed.next_begin_offset,
        parsed.min_offset,
        parsed.max_offset,
        parsed.record_count,
    ) == (message_pb2.FOUND, 7, 2, 9, 3)
    # the same bytes protobuf writes for the whole message, head first then records
    whole = head()
    whole.records = records
    assert store_pb2.PullResponse.FromString(whole.SerializeToString()) == parsed


def test_no_records_is_the_heads_own_encoding() -> None:
    assert encode_pull(head(), []) == head().SerializeToString()


def test_a_head_carrying_records_is_refused() -> None:
    with pytest.raises(ValueError, match="must not carry records"):
        encode_pull(head(records=b"x"), [b"y"])  # type: ignore[arg-type]


@given(
    parts=st.lists(st.binary(max_size=300), max_size=8),
    offset=st.integers(min_value=0, max_value=(1 << 63) - 1),
    count=st.integers(min_value=0, max_value=(1 << 31) - 1),
)
def test_any_records_and_head_parse_back(parts: list[bytes], offset: int, count: int) -> None:
    answer = store_pb2.PullResponse(next_begin_offset=offset, record_count=count)
    parsed = store_pb2.PullResponse.FromString(encode_pull(answer, parts))
    assert parsed.records == b"".join(parts)
    assert (parsed.next_begin_offset, parsed.record_count) == (offset, count)


def test_a_suggestion_is_appended_and_leaves_the_records_as_they_were() -> None:
    encoded = encode_pull(head(), [b"abc", b"def"])
    answer = PullAnswer.parse(encoded)
    assert answer.record_count == 3 and answer.response.suggest_broker_id == 0
    answer.suggest(1)
    assert answer.encoded.startswith(encoded)
    parsed = store_pb2.PullResponse.FromString(answer.encoded)
    assert parsed.suggest_broker_id == 1 == answer.response.suggest_broker_id
    assert parsed.records == b"abcdef" and parsed.max_offset == 9


def test_a_message_answer_counts_its_messages() -> None:
    response = store_pb2.PullResponse(messages=[message_pb2.MessageExt()] * 2)
    assert PullAnswer.parse(response.SerializeToString()).record_count == 2


def test_bytes_that_are_no_pull_response_raise_decode_error() -> None:
    with pytest.raises(DecodeError):
        PullAnswer.parse(b"\x32\xff\xff\xff\xff\x0f")  # records longer than the bytes


def test_split_records_sets_the_records_aside_as_a_view_of_the_bytes() -> None:
    records = b"r" * 1000
    encoded = encode_pull(head(), [records])
    response, found = split_records(encoded)
    assert isinstance(found, memoryview) and found.obj is encoded  # not a copy
    assert bytes(found) == records and response.records == b""
    assert (
        response.status,
        response.next_begin_offset,
        response.max_offset,
        response.record_count,
    ) == (message_pb2.FOUND, 7, 9, 3)


def test_split_records_reads_any_field_order_and_a_suggestion_after_the_records() -> None:
    answer = PullAnswer.parse(encode_pull(head(), [b"abc"]))
    answer.suggest(1)
    response, found = split_records(answer.encoded)
    assert bytes(found) == b"abc" and response.suggest_broker_id == 1
    whole = head(suggest_broker_id=1)
    whole.records = b"xyz"  # protobuf's own order: records before record_count
    response, found = split_records(whole.SerializeToString())
    assert bytes(found) == b"xyz" and response.record_count == 3
    assert response.suggest_broker_id == 1


def test_split_records_of_an_answer_without_records_is_an_empty_view() -> None:
    response, found = split_records(head().SerializeToString())
    assert len(found) == 0 and response.max_offset == 9


@pytest.mark.parametrize(
    "encoded",
    [
        b"\x08",  # a varint field's key, no value
        b"\x08\xff\xff",  # a varint cut short
        b"\x32\x05abc",  # records longer than the bytes left
        b"\x3b",  # wire type 3 (a group's start)
        b"\x0c",  # wire type 4
        b"\x09\x00\x00",  # an 8-byte field cut short
        b"\x08" + b"\xff" * 11,  # a varint of more than 10 bytes
    ],
)
def test_split_records_of_damaged_bytes_raises_decode_error(encoded: bytes) -> None:
    with pytest.raises(DecodeError):
        split_records(encoded)


# ------------------------------------------------------------------ PullQueues answers
@given(
    queues=st.lists(
        st.tuples(
            st.lists(st.binary(max_size=200), max_size=4),
            st.integers(min_value=0, max_value=(1 << 40)),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_pull_queues_answer_parses_as_protobufs_message(
    queues: list[tuple[list[bytes], int]],
) -> None:
    answers = [
        pull_parts(store_pb2.PullResponse(next_begin_offset=offset, record_count=len(parts)), parts)
        for parts, offset in queues
    ]
    parsed = store_pb2.PullQueuesResponse.FromString(encode_pull_queues(answers))
    assert [(a.records, a.next_begin_offset, a.record_count) for a in parsed.answers] == [
        (b"".join(parts), offset, len(parts)) for parts, offset in queues
    ]


def test_queues_answer_keeps_each_answer_and_appends_a_suggestion() -> None:
    encoded = encode_pull_queues([pull_parts(head(), [b"xyz"]), pull_parts(head(), [])])
    answer = QueuesAnswer.parse(encoded)
    assert [r.record_count for r in answer.responses] == [3, 3]
    assert [r.ByteSize() for r in answer.responses] == [
        len(b"".join(pull_parts(head(), [b"xyz"]))),
        len(head().SerializeToString()),
    ]
    answer.suggest(1)
    parsed = store_pb2.PullQueuesResponse.FromString(answer.encoded)
    assert parsed.suggest_broker_id == 1 and parsed.answers[0].records == b"xyz"


@pytest.mark.parametrize(
    "encoded",
    [
        b"\x0a\x05ab",  # an answer longer than the bytes left
        b"\x0a\x02\x08",  # an answer whose own varint field is cut
        b"\x10",  # suggest_broker_id without its value
    ],
)
def test_damaged_pull_queues_answers_raise_decode_error(encoded: bytes) -> None:
    with pytest.raises(DecodeError):
        QueuesAnswer.parse(encoded)


def test_an_answer_is_framed_and_assembled_back_into_a_pull_queues_answer() -> None:
    """What the broker does when some queues' answers come from the store and some were kept:
    the frames of the store's answer (views of it, a suggestion left out) and frames of
    kept answers join into one PullQueuesResponse, in the order given."""
    store_answer = QueuesAnswer.parse(
        encode_pull_queues([pull_parts(head(), [b"abc", b"de"]), pull_parts(head(), [])])
        + store_pb2.PullQueuesResponse(suggest_broker_id=1).SerializeToString()
    )
    framed = store_answer.framed()
    assert [bytes(frame) for _, frame in framed] == [
        bytes(frame) for frame in answer_frames(store_answer.encoded)
    ]
    kept = store_pb2.PullResponse(
        status=message_pb2.OFFSET_OVERFLOW_ONE, next_begin_offset=4, min_offset=0, max_offset=4
    )
    assembled = QueuesAnswer.assemble([framed[1], (kept, answer_frame(kept)), framed[0]])
    parsed = store_pb2.PullQueuesResponse.FromString(assembled.encoded)
    assert list(parsed.answers) == [store_answer.responses[1], kept, store_answer.responses[0]]
    assert parsed.answers[2].records == b"abcde" and parsed.suggest_broker_id == 0
    assert assembled.responses == [store_answer.responses[1], kept, store_answer.responses[0]]
    assert QueuesAnswer.assemble([]).encoded == b""


@pytest.mark.parametrize("encoded", [b"\x0a\x05ab", b"\x0a", b"\x0b"])
def test_damaged_answers_cannot_be_framed(encoded: bytes) -> None:
    with pytest.raises(DecodeError):
        answer_frames(encoded)
