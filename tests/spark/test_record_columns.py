"""The bulk decoder against the record-by-record one, on the same bytes: equal batches.

Records are built here with the store's own encoders, so every layout the
format allows can be laid next to the common one: IPv6 hosts, long topics,
short and empty bodies, repeated or malformed properties, non-UTF-8 text.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.spark.record_columns import RecordBlock, record_starts
from boltmq.spark.schema import COMMITLOG_COLUMNS, CORRUPT_COLUMN, RowBuffer, arrow_schema
from boltmq.wire.record import (
    BODY_CRC_OFFSET,
    FIXED_OVERHEAD_IPV4,
    HEADS,
    MAGIC_BLANK,
    body_crc,
    decode_records,
)
from boltmq.wire.record_encoding import (
    blank_marker,
    encode_host,
    encode_properties,
    encode_tail,
    encode_topic,
    host_sys_flags,
)

IPV4 = encode_host("10.1.2.3", 10911)
RECORD_MIN = FIXED_OVERHEAD_IPV4
IPV6 = encode_host("fe80::1", 10911)


def record(
    topic: str = "Orders",
    body: bytes = b"hello world, a body",
    *,
    properties: bytes | None = None,
    born: bytes = IPV4,
    store: bytes = IPV4,
    queue_offset: int = 0,
    physical: int = 0,
) -> bytes:
    """One CommitLog record (the format of boltmq/wire/record.py)."""
    raw = (
        encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "seq": str(queue_offset)})
        if properties is None
        else properties
    )
    head = HEADS[(len(born) == 20, len(store) == 20)]
    topic_field, magic = encode_topic(topic)
    tail = encode_tail(topic_field, raw)
    total = head.size + len(body) + len(tail)
    return (
        head.pack(
            total,
            magic,
            body_crc(body),
            3,
            0,
            queue_offset,
            physical,
            host_sys_flags(born, store),
            1_700_000_000_123,
            born,
            1_700_000_000_456 + queue_offset,
            store,
            2,
            0,
            len(body),
        )
        + body
        + tail
    )


def laid_out(*records: bytes) -> bytes:
    """Records back to back, each with its own physical offset patched in."""
    out = bytearray()
    for one in records:
        patched = bytearray(one)
        patched[28:36] = len(out).to_bytes(8, "big")
        out += patched
    return bytes(out)


@pytest.fixture(scope="module")
def schema(spark) -> pa.Schema:  # type: ignore[no-untyped-def]
    return arrow_schema(spark.createDataFrame([], COMMITLOG_COLUMNS + CORRUPT_COLUMN).schema)


def both(
    data: bytes, schema: pa.Schema, include_body: bool = True
) -> tuple[RecordBlock, pa.RecordBatch]:
    """The bulk block of ``data`` and the record-by-record batch of the same records."""
    starts, stop = record_starts(data, 0, len(data), len(data))
    assert stop == len(data)
    rows = RowBuffer(
        schema, None, include_body=include_body, commitlog_extras=True, corrupt_column=True
    )
    for one in decode_records(data, check_crc=False):
        rows.add(one)
    return RecordBlock(np.frombuffer(data, dtype=np.uint8), starts), rows.take()


def bulk(block: RecordBlock, schema: pa.Schema, include_body: bool = True) -> pa.RecordBatch:
    assert block.plain
    return block.to_batch(
        schema,
        None,
        include_body=include_body,
        commitlog_extras=True,
        corrupt=np.zeros(len(block), dtype=bool),
    )


def test_plain_records_decode_equal(schema) -> None:
    data = laid_out(
        record(queue_offset=0),
        record(body=b"", queue_offset=1, properties=b""),
        record(body=b"12 bytes!!!!", queue_offset=2),  # inline in a binary view
        record(body=b"13 bytes!!!!!", queue_offset=3),  # in the data buffer
        record(
            topic="Zahlungen-\u00e9",
            body=bytes(range(256)) * 8,
            queue_offset=4,
            properties="KEYS\x01\x02a\x01\x02b\u00e9\x01v\x01w\x02".encode(),
        ),
        record(queue_offset=5, properties=encode_properties({"TAGS": "x"})),
        record(queue_offset=6, properties=encode_properties({"only": "one"})),
    )
    block, expected = both(data, schema)
    got = bulk(block, schema)
    assert got.equals(expected), (got.to_pylist(), expected.to_pylist())
    assert not block.crc_bad().any()
    assert bulk(block, schema, include_body=False).equals(both(data, schema, False)[1])
    row = got.to_pylist()[4]
    assert row["keys"] == [] and dict(row["properties"]) == {"a": "", "b\u00e9": "v\x01w"}


def test_selection_keeps_the_chosen_records(schema) -> None:
    data = laid_out(*(record(topic=f"T{i % 3}", queue_offset=i) for i in range(20)))
    block, expected = both(data, schema)
    keep = np.array([i % 3 == 1 for i in range(20)])
    got = block.take(keep).to_batch(
        schema,
        None,
        include_body=True,
        commitlog_extras=True,
        corrupt=np.zeros(int(keep.sum()), dtype=bool),
    )
    assert got.equals(expected.filter(pa.array(keep)))


@pytest.mark.parametrize(
    "odd",
    [
        record(born=IPV6),
        record(store=IPV6),
        record(topic="L" * 200),  # the long-topic magic
        record(properties=b"TAGS\x01a\x02TAGS\x01b\x02"),  # a name given twice
        record(properties=b"no separator\x02"),
        record(properties=b"bad\x01\xff\xfe\x02"),  # not UTF-8
    ],
    ids=["born-ipv6", "store-ipv6", "long-topic", "repeated-name", "no-separator", "not-utf8"],
)
def test_unusual_records_are_left_to_the_exact_path(odd: bytes) -> None:
    data = laid_out(record(), odd, record(queue_offset=2))
    starts, stop = record_starts(data, 0, len(data), len(data))
    assert stop == len(data) and len(starts) == 3
    assert not RecordBlock(np.frombuffer(data, dtype=np.uint8), starts).plain
    assert RecordBlock(np.frombuffer(data, dtype=np.uint8), [starts[0], starts[2]]).plain


def test_a_bad_crc_is_found(schema) -> None:
    data = bytearray(laid_out(record(), record(queue_offset=1), record(queue_offset=2)))
    second = len(record())
    data[second + BODY_CRC_OFFSET] ^= 0x5A
    block, _ = both(bytes(data), schema)
    assert block.crc_bad().tolist() == [False, True, False]


def walked(data: bytes, position: int, limit: int, until: int) -> tuple[list[int], int]:
    """record_starts's walk, one size field at a time (the reference)."""
    starts: list[int] = []
    end = min(until, len(data))
    while position < end and position + 8 <= len(data) and len(starts) < limit:
        total = int.from_bytes(data[position : position + 4], "big", signed=True)
        magic = int.from_bytes(data[position + 4 : position + 8], "big")
        if magic == MAGIC_BLANK or total < RECORD_MIN or position + total > len(data):
            break
        starts.append(position)
        position += total
    return starts, position


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0, 0, 0, 1, 2]), min_size=1, max_size=40),
    st.sampled_from(["blank", "zeros", "torn", "none"]),
    st.integers(1, 50),
    st.integers(0, 4000),
)
def test_runs_of_equal_sizes_are_walked_as_one_record_at_a_time(
    sizes: list[int], tail: str, limit: int, until: int
) -> None:
    """Fixed-size records are checked in bulk; runs broken by another size, a blank
    marker, zeros, a torn record, the limit or ``until`` stop where the walk stops."""
    bodies = {0: b"a" * 50, 1: b"b" * 51, 2: b"c" * 200}
    data = laid_out(*[record(body=bodies[kind]) for kind in sizes])
    data += {
        "blank": blank_marker(64) + bytes(56),
        "zeros": bytes(300),
        "torn": record(body=bodies[0])[:-1],
        "none": b"",
    }[tail]
    assert record_starts(data, 0, len(data), limit, until) == walked(data, 0, limit, until)
    assert record_starts(data, 0, len(data), limit) == walked(data, 0, limit, len(data))


def test_walk_stops_at_a_blank_marker_a_zero_header_and_bad_sizes() -> None:
    one = record()
    data = laid_out(one, one) + blank_marker(64) + bytes(56)
    assert record_starts(data, 0, len(data), 100) == ([0, len(one)], 2 * len(one))
    assert int.from_bytes(data[2 * len(one) + 4 : 2 * len(one) + 8], "big") == MAGIC_BLANK
    zeros = laid_out(one) + bytes(100)
    assert record_starts(zeros, 0, len(zeros), 100) == ([0], len(one))
    torn = laid_out(one, one)[:-1]
    assert record_starts(torn, 0, len(torn), 100) == ([0], len(one))
    assert record_starts(laid_out(one, one), 0, 2 * len(one), 1) == ([0], len(one))
    assert record_starts(laid_out(one, one), 0, 2 * len(one), 9, until=1) == ([0], len(one))
