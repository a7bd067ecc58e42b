"""The sections of a send checked in one pass (``checked_batches``) find exactly what each
section checked on its own (``checked_batch``) finds: the same refused records with the same
reasons, the same delay flag, the same positions; a section whose records cannot be framed
is None (it goes alone, where its own raw request refuses every record)."""

from __future__ import annotations

import struct

import pytest

from boltmq.message import Message
from boltmq.v1 import broker_pb2
from boltmq.wire.record import SYS_FLAG_OFFSET, SYS_FLAG_TRANSACTION_MASK
from boltmq.wire.record_batch import RecordBatch
from boltmq.wire.record_heads import CHECK_COLUMNS_MIN
from services.broker.config import BrokerConfig
from services.broker.send.checked_batch import CheckedBatch, checked_batch, checked_batches

CONFIG = BrokerConfig(max_message_size_bytes=1024)


def record(topic: str, body: bytes = b"body", **properties: str) -> bytes:
    return Message(topic, body, properties=properties).to_record()


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def batch(topic: str, *records: bytes, queue_id: int = 0) -> RecordBatch:
    return RecordBatch(b"".join(records), len(records), topic, queue_id)


def sections() -> list[RecordBatch]:
    good = record("A")
    return [
        batch("A", good),
        batch("A", good, record("A", b"x" * 2000), good),  # the body over the limit
        batch("B", record("B"), record("A")),  # a record of another topic
        batch("C", patched(record("C"), 4, ">I", 0xDEADBEEF)),  # a bad magic
        batch("D", patched(record("D"), SYS_FLAG_OFFSET, ">i", SYS_FLAG_TRANSACTION_MASK)),
        batch("E", record("E"), record("E", DELAY="3")),  # a delay: goes alone
        batch("F", record("F", TIMER_DELIVER_MS="99"), queue_id=2),
        RecordBatch(record("G") + b"trailing", 1, "G", 0),  # cannot be framed
        RecordBatch(record("H"), 2, "H", 0),  # record_count says more than there are
        batch("I", *[record("I", b"m%d" % n) for n in range(CHECK_COLUMNS_MIN)]),
        batch(
            "J",
            *[record("J", b"m%d" % n) for n in range(CHECK_COLUMNS_MIN)],
            record("J", b"y" * 2000),
        ),
        batch("K", record("K", KEYS="k1 k2", TAGS="t")),
    ]


def alone(one: RecordBatch) -> CheckedBatch | None:
    found = checked_batch(one.records, one.count, one.topic, one.queue_id, CONFIG)
    return None if isinstance(found, broker_pb2.SendResponse) else found


def test_one_pass_finds_what_each_section_alone_finds() -> None:
    every = sections()
    together = checked_batches(every, CONFIG)
    assert len(together) == len(every)
    for one, checked in zip(every, together, strict=True):
        expected = alone(one)
        if expected is None:
            assert checked is None, one.topic
            continue
        assert checked is not None, one.topic
        assert checked.batch == one
        assert checked.positions == expected.positions
        assert checked.refused == expected.refused, one.topic
        assert checked.delayed == expected.delayed, one.topic


def test_the_checks_refuse_what_they_should() -> None:
    found = checked_batches(sections(), CONFIG)
    refused = [None if c is None else c.refused for c in found]
    assert refused[0] == {} and refused[10] is not None and refused[11] == {}
    assert "body is 2000 bytes" in (refused[1] or {})[1] and len(refused[1] or {}) == 1
    assert "topic" in (refused[2] or {})[1] and len(refused[2] or {}) == 1
    assert "magic" in (refused[3] or {})[0] and len(refused[3] or {}) == 1
    assert "transaction bits" in (refused[4] or {})[0] and len(refused[4] or {}) == 1
    assert [c is not None and c.delayed for c in found] == [
        False,
        False,
        False,
        False,
        False,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    assert found[7] is None and found[8] is None  # unframeable: alone
    assert set(refused[9] or {}) == set()
    assert set(refused[10] or {}) == {CHECK_COLUMNS_MIN}


@pytest.mark.parametrize("count", [1, 2, 5])
def test_a_delay_in_one_section_flags_that_section_only(count: int) -> None:
    plain = [batch(f"T{n}", record(f"T{n}")) for n in range(count)]
    delayed = batch("Late", record("Late", DELAY="2"))
    every = [*plain, delayed, *plain]
    checked = checked_batches(every, CONFIG)
    assert [c is not None and c.delayed for c in checked] == [False] * count + [True] + [
        False
    ] * count


def test_no_sections_no_answers() -> None:
    assert checked_batches([], CONFIG) == []
