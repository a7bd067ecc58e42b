"""The sink's encoder (rows of an Arrow batch straight to CommitLog records) against
the SDK's (``Message.to_record``, with the unique id the sink gave the row): the same
bytes, and the same refusals, named by row.
No SparkSession: the encoder reads Arrow batches only.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from boltmq.message import Message
from boltmq.spark.errors import WriteError
from boltmq.spark.options import WRITE_COLUMNS, SinkOptions
from boltmq.spark.sink import _records
from boltmq.wire.record import decode_records

BORN_MS = 1_700_000_000_000


def options(batch: pa.RecordBatch, topic: str | None = None) -> SinkOptions:
    return SinkOptions(
        registry="127.0.0.1:1",
        topic=topic,
        columns=tuple(c for c in batch.schema.names if c in WRITE_COLUMNS),
    )


def encoded(batch: pa.RecordBatch, topic: str | None = None) -> list[tuple[object, bytes]]:
    return [
        (key, b"".join(parts)) for key, parts in _records(options(batch, topic), batch, BORN_MS)
    ]


def unique_id(record: bytes) -> str:
    """The unique id the sink gave a row (each its own, as a producer's send)."""
    return decode_records(record, check_crc=False)[0].unique_id


def test_rows_encode_to_the_records_the_sdk_encodes() -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["A", None, "B"]),
            "body": pa.array([b"one", b"\x00two", b"three"]),
            "tags": pa.array(["t1", None, ""]),
            "keys": pa.array([["k1", "k2"], None, []], pa.list_(pa.string())),
            "properties": pa.array([[("p", "v")], None, []], pa.map_(pa.string(), pa.string())),
            "sharding_key": pa.array([None, "user-1", None]),
            "ignored": pa.array([1, 2, 3]),
        }
    )
    expected = [
        Message(topic="A", body=b"one", tags="t1", keys=["k1", "k2"], properties={"p": "v"}),
        Message(topic="Default", body=b"\x00two"),
        Message(topic="B", body=b"three"),
    ]
    got = encoded(batch, topic="Default")
    ids = [unique_id(record) for _, record in got]
    assert all(re.fullmatch("[0-9A-F]{32}", i) for i in ids) and len(set(ids)) == 3
    assert got == [
        (("A", None), expected[0].to_record(BORN_MS, unique_id=ids[0])),
        (("Default", "user-1"), expected[1].to_record(BORN_MS, unique_id=ids[1])),
        (("B", None), expected[2].to_record(BORN_MS, unique_id=ids[2])),
    ]


def test_a_row_keeps_the_unique_id_its_properties_name() -> None:
    batch = pa.record_batch(
        {
            "body": pa.array([b"x"]),
            "properties": pa.array([[("UNIQ_KEY", "row-id")]], pa.map_(pa.string(), pa.string())),
        }
    )
    ((_, record),) = encoded(batch, topic="T")
    assert unique_id(record) == "row-id"


def test_a_string_body_is_sent_as_its_utf8_bytes() -> None:
    batch = pa.record_batch({"body": pa.array(["héllo"])})
    ((key, record),) = encoded(batch, topic="T")
    message = Message(topic="T", body="héllo".encode())
    assert (key, record) == (("T", None), message.to_record(BORN_MS, None, unique_id(record)))


@pytest.mark.parametrize(
    "columns, topic, reason",
    [
        ({"body": pa.array([b"ok", None])}, "T", "row 1: body is null"),
        (
            {"body": pa.array([b"ok"]), "topic": pa.array([None])},
            None,
            "row 0: topic is null and no topic option",
        ),
        (
            {"body": pa.array([b"ok"]), "keys": pa.array([["a b"]])},
            "T",
            "row 0: a message to 'T' is invalid: .*key",
        ),
        (
            {"body": pa.array([b"ok"]), "topic": pa.array(["T" * 70_000])},
            None,
            "row 0: a message to 'TTTT.*' is invalid: topic is 70000 bytes",
        ),
        (
            {
                "body": pa.array([b"ok"]),
                "properties": pa.array([[("a", "b\x02")]], pa.map_(pa.string(), pa.string())),
            },
            "T",
            "row 0: .*separator",
        ),
    ],
)
def test_a_row_no_store_accepts_fails_the_task_naming_the_row(
    columns: dict[str, pa.Array], topic: str | None, reason: str
) -> None:
    with pytest.raises(WriteError, match=reason):
        encoded(pa.record_batch(columns), topic)
