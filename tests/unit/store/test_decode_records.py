"""decode_records: a raw pull's records decoded in one loop, with decode_record's checks;
decode_pulled: the same records and errors, the checks of long runs made in bulk."""

from __future__ import annotations

import gc
import struct
from collections.abc import Callable

import pytest

from boltmq.wire import pulled_records
from boltmq.wire.pulled_records import decode_pulled
from boltmq.wire.record import (
    BODY_CRC_OFFSET,
    SYS_FLAG_BORN_HOST_V6,
    CorruptRecord,
    RecordView,
    decode_record,
    decode_records,
)
from boltmq.wire.record_batch import RAW_HEAD, encode_send_record

INT = struct.Struct(">i")


def with_int(raw: bytes, offset: int, value: int) -> bytes:
    data = bytearray(raw)
    INT.pack_into(data, offset, value)
    return bytes(data)


def ipv6_record(body: bytes) -> bytes:
    """A record in the 20-byte born-host layout, as a store writes for an IPv6 producer."""
    v4 = encode_send_record("B", body)
    data = bytearray(v4[:48]) + bytes(20) + v4[56:]
    INT.pack_into(data, 0, len(data))
    INT.pack_into(data, 36, SYS_FLAG_BORN_HOST_V6)
    return bytes(data)


def tracked_objects_made(
    decode: Callable[[bytes], list[RecordView]], data: bytes
) -> tuple[list[RecordView], int]:
    """``decode(data)`` and how many objects the cyclic collector tracks after it that it
    did not before (the collector off meanwhile)."""
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        records = decode(data)
        return records, len(gc.get_objects()) - before
    finally:
        gc.enable()


def test_every_record_and_topic_comes_back_in_order() -> None:
    raws = [
        encode_send_record("A", b"1", tags="x"),
        encode_send_record("A", b"2"),
        ipv6_record(b"3"),
        encode_send_record("C", b"4", keys=["k"]),
    ]
    got = decode_records(b"".join(raws))
    assert [(m.topic, bytes(m.body)) for m in got] == [
        ("A", b"1"),
        ("A", b"2"),
        ("B", b"3"),
        ("C", b"4"),
    ]
    assert got[0].tags == "x" and got[3].keys == ["k"]
    assert got[2].sys_flag & SYS_FLAG_BORN_HOST_V6
    one = decode_record(memoryview(raws[1]), 0)
    assert got[1].total_size == one.total_size and got[1].body_crc == one.body_crc


def damaged() -> dict[str, bytes]:
    good = encode_send_record("A", b"body")
    return {
        "crc": with_int(good, BODY_CRC_OFFSET, 1),
        "truncated": good[:-1],
        "short header": good[:50],
        "body overruns": with_int(good, RAW_HEAD.size - 4, 500),
        "negative body": with_int(good, RAW_HEAD.size - 4, -1),
        # total_size one more than body, topic and properties add up to:
        "sections": with_int(good, 0, len(good) + 1) + b"\x00",
    }


@pytest.mark.parametrize("case", sorted(damaged()))
def test_a_damaged_record_raises_corrupt_record(case: str) -> None:
    good = encode_send_record("A", b"ok")
    with pytest.raises(CorruptRecord):
        decode_records(good + damaged()[case])


def test_the_crc_check_can_be_left_to_the_reader_of_the_disk() -> None:
    bad = with_int(encode_send_record("A", b"body"), BODY_CRC_OFFSET, 1)
    assert bytes(decode_records(bad, check_crc=False)[0].body) == b"body"


def test_a_pull_leaves_one_collector_tracked_object_per_record() -> None:
    # The cyclic collector walks every tracked object that outlives a collection;
    # views and head tuples made up front left four per record and the walks were
    # a fifth of a consumer's CPU. A record is now one object; its fields come
    # from the buffer when asked for.
    count = 1000
    data = b"".join(
        encode_send_record("A", bytes([n % 251]) * 100, tags="t", keys=["k"]) for n in range(count)
    )
    records, made = tracked_objects_made(decode_records, data)
    assert len(records) == count
    assert made <= count + 10, f"{made} tracked objects for {count} records"
    assert [bytes(r.body)[:1] for r in records[:3]] == [b"\x00", b"\x01", b"\x02"]
    assert records[-1].tags == "t" and records[-1].keys == ["k"]
    assert records[-1].total_size == len(data) // count and records[-1].topic == "A"


def fields(records: list) -> list[tuple]:  # type: ignore[type-arg]
    return [
        (m.total_size, m.topic, bytes(m.body), m.properties, m.queue_offset, m.msg_id, m.sys_flag)
        for m in records
    ]


RUNS = {
    "same size": [encode_send_record("A", bytes([n]) * 1024) for n in range(40)],
    "sizes differ, tags and keys": [
        encode_send_record("A", b"b" * n, tags="t", keys=["k"]) for n in range(1, 41)
    ],
    "fewer than 16": [encode_send_record("A", b"b" * n) for n in range(1, 9)],
    "two topics": [encode_send_record("AB"[n % 2], b"b") for n in range(40)],
    "an IPv6 host": [encode_send_record("B", b"b")] * 20 + [ipv6_record(b"6")],
    "a long topic": [encode_send_record("L" * 200, b"b")] * 20,
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_decode_pulled_gives_what_decode_records_gives(run: str) -> None:
    data = b"".join(RUNS[run])
    assert fields(decode_pulled(data)) == fields(decode_records(data))
    assert len(decode_pulled(data)) == len(RUNS[run])


@pytest.mark.parametrize("case", sorted(damaged()))
def test_decode_pulled_refuses_a_damaged_record_in_a_long_run_as_decode_records_does(
    case: str,
) -> None:
    good = b"".join(encode_send_record("A", b"body") for _ in range(30))
    data = good + damaged()[case] + good
    with pytest.raises(CorruptRecord) as loop:
        decode_records(data)
    with pytest.raises(CorruptRecord) as bulk:
        decode_pulled(data)
    assert str(bulk.value) == str(loop.value)


def test_decode_pulled_checks_a_long_run_of_one_topic_without_the_record_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def loop(data: object, check_crc: bool = True) -> list:  # type: ignore[type-arg]
        raise AssertionError("the run went to the record by record loop")

    monkeypatch.setattr(pulled_records, "decode_records", loop)
    for run in ("same size", "sizes differ, tags and keys"):
        assert len(decode_pulled(b"".join(RUNS[run]))) == 40
    bad_crc = b"".join(
        RUNS["same size"][:20] + [with_int(RUNS["same size"][20], BODY_CRC_OFFSET, 1)]
    )
    with pytest.raises(AssertionError, match="record by record"):
        decode_pulled(bad_crc)  # a refusal is the loop's, word for word
    assert bytes(decode_pulled(bad_crc, check_crc=False)[20].body) == bytes([20]) * 1024


def test_decode_pulled_leaves_one_collector_tracked_object_per_record() -> None:
    count = 1000
    data = b"".join(encode_send_record("A", bytes([n % 251]) * 100, tags="t") for n in range(count))
    records, made = tracked_objects_made(decode_pulled, data)
    assert len(records) == count and records[-1].tags == "t"
    assert made <= count + 10, f"{made} tracked objects for {count} records"
