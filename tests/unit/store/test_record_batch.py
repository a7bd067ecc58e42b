"""Raw record batches (the SDK's send form): framing, verification and the patched append.

Every bad input gets its own status and leaves nothing on disk; good records
of the same batch are stored with the fields only the store knows filled in.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from boltmq.wire.record import (
    BODY_CRC_OFFSET,
    MAGIC_OFFSET,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_OFFSET,
    SYS_FLAG_TRANSACTION_PREPARED,
    TOTAL_SIZE_OFFSET,
    InvalidMessage,
    decode_record,
)
from boltmq.wire.record_batch import (
    RAW_HEAD,
    MalformedBatch,
    RecordBatch,
    encode_send_record,
    frame_records,
)
from boltmq.wire.record_heads import check_batch
from services.store import MessageStore
from services.store.status import PutStatus

TOPIC = "Orders"
INT = struct.Struct(">i")
SHORT = struct.Struct(">H")
MakeStore = Callable[..., MessageStore]


def record(body: bytes = b"hello", topic: str = TOPIC, **fields: object) -> bytes:
    return encode_send_record(topic, body, **fields)  # type: ignore[arg-type]


def batch(*records: bytes, topic: str = TOPIC, queue_id: int = 1) -> RecordBatch:
    return RecordBatch(b"".join(records), len(records), topic, queue_id)


def patched(raw: bytes, offset: int, value: int) -> bytes:
    data = bytearray(raw)
    INT.pack_into(data, offset, value)
    return bytes(data)


def with_properties_length(raw: bytes, length: int) -> bytes:
    """A record whose properties section claims ``length`` bytes (and has them)."""
    body_len = INT.unpack_from(raw, RAW_HEAD.size - 4)[0]
    props_at = RAW_HEAD.size + body_len + 1 + len(TOPIC)
    data = bytearray(raw[:props_at]) + SHORT.pack(length) + b"a" * length
    INT.pack_into(data, TOTAL_SIZE_OFFSET, len(data))
    return bytes(data)


def stored_bodies(store: MessageStore, queue_id: int = 1) -> list[bytes]:
    assert store.wait_dispatched()
    got = store.get_messages(TOPIC, queue_id, 0, 100)
    return [bytes(m.body) for m in got.messages]


# ------------------------------------------------------------------ encoding


def test_a_send_record_decodes_with_every_field_the_sender_set() -> None:
    raw = record(
        b"body", tags="A", keys=["k1", "k2"], properties={"p": "v"}, flag=7, born_timestamp_ms=1234
    )
    view = decode_record(memoryview(raw), 0, check_crc=True)
    assert (view.topic, bytes(view.body), view.tags, view.keys, view.flag, view.born_timestamp) == (
        TOPIC,
        b"body",
        "A",
        ["k1", "k2"],
        7,
        1234,
    )
    assert view.properties["p"] == "v"
    assert view.total_size == len(raw)


@pytest.mark.parametrize(
    "fields, reason",
    [
        (dict(properties={"a\x01": "b"}), "separator"),
        (dict(keys=["has space"]), "key"),
        (dict(properties={"big": "v" * 40_000}), "at most 32767"),
    ],
)
def test_the_encoder_refuses_what_no_store_accepts(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason):
        record(**fields)  # type: ignore[arg-type]


def test_framing_names_the_record_where_the_sizes_break() -> None:
    good = record()
    assert frame_records(good + good, 2) == [0, len(good)]
    with pytest.raises(MalformedBatch, match=r"records\[1\]"):
        frame_records(good + patched(good, TOTAL_SIZE_OFFSET, 10_000), 2)
    with pytest.raises(MalformedBatch, match="after the 1 records"):
        frame_records(good + good, 1)
    with pytest.raises(MalformedBatch, match=r"records\[2\]"):
        frame_records(good + good, 3)
    with pytest.raises(MalformedBatch, match="record_count"):
        frame_records(good, 0)


# ------------------------------------------------------------------ the store


def test_a_raw_batch_is_stored_with_offsets_hosts_and_time_patched(make_store: MakeStore) -> None:
    store = make_store()
    results = store.put_messages(
        batch(
            record(b"a", tags="T1", keys=["k"]), record(b"b"), record(b"c", born_timestamp_ms=99)
        ),
        ("10.1.2.3", 4567),
    )
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 3
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert stored_bodies(store) == [b"a", b"b", b"c"]
    for result in results:
        view = store.look_message(result.commitlog_offset)
        assert view is not None
        assert (view.commitlog_offset, view.queue_offset, view.queue_id) == (
            result.commitlog_offset,
            result.queue_offset,
            1,
        )
        assert view.born_host == "10.1.2.3:4567"
        assert view.store_host == f"{store.config.store_host}:{store.config.store_port}"
        assert view.store_timestamp == result.store_timestamp
        assert view.msg_id == result.msg_id
    last = store.look_message(results[2].commitlog_offset)
    first = store.look_message(results[0].commitlog_offset)
    assert last is not None and first is not None
    assert last.born_timestamp == 99
    assert first.born_timestamp == results[0].store_timestamp  # 0 means the store's clock
    assert [m.msg_id for m in store.query_messages(TOPIC, "k")] == [results[0].msg_id]
    assert store.get_messages(TOPIC, 1, 0, 10, subscription="T1").messages[0].body == b"a"
    assert store.verify() == []


def bad_records() -> dict[str, tuple[bytes, PutStatus, str]]:
    good = record(b"x" * 100)
    flipped = bytearray(good)
    flipped[RAW_HEAD.size] ^= 0xFF  # first body byte: the CRC no longer matches
    return {
        "bad crc": (bytes(flipped), PutStatus.MESSAGE_ILLEGAL, "CRC"),
        "crc field": (patched(good, BODY_CRC_OFFSET, 1), PutStatus.MESSAGE_ILLEGAL, "CRC"),
        "other topic": (record(b"x", topic="Other"), PutStatus.MESSAGE_ILLEGAL, "topic"),
        "oversize body": (record(b"x" * (48 * 1024 + 1)), PutStatus.MESSAGE_ILLEGAL, "body is"),
        "empty body": (record(b""), PutStatus.MESSAGE_ILLEGAL, "body is 0"),
        "oversize properties": (
            with_properties_length(good, 40_000),
            PutStatus.PROPERTIES_SIZE_EXCEEDED,
            "at most 32767",
        ),
        "bad magic": (patched(good, MAGIC_OFFSET, 0x12345678), PutStatus.MESSAGE_ILLEGAL, "magic"),
        "ipv6 layout": (
            patched(good, SYS_FLAG_OFFSET, SYS_FLAG_BORN_HOST_V6),
            PutStatus.MESSAGE_ILLEGAL,
            "placeholder",
        ),
        "broken properties": (
            with_properties_length(good, 3),
            PutStatus.MESSAGE_ILLEGAL,
            "separator",
        ),
        "negative body length": (
            patched(good, RAW_HEAD.size - 4, -5),
            PutStatus.MESSAGE_ILLEGAL,
            "body is",
        ),
        "sections overrun": (
            patched(good, RAW_HEAD.size - 4, 200),
            PutStatus.MESSAGE_ILLEGAL,
            "room",
        ),
    }


@pytest.mark.parametrize("case", sorted(bad_records()))
def test_a_bad_record_is_refused_alone_and_nothing_of_it_lands(
    make_store: MakeStore, case: str
) -> None:
    bad, status, reason = bad_records()[case]
    store = make_store()
    results = store.put_messages(batch(record(b"before"), bad, record(b"after")))
    assert [r.status for r in results] == [PutStatus.PUT_OK, status, PutStatus.PUT_OK]
    assert reason in results[1].error and "records[1]" in results[1].error
    assert results[1].commitlog_offset == -1
    assert stored_bodies(store) == [b"before", b"after"]
    assert store.commitlog.max_offset == results[0].wrote_bytes + results[2].wrote_bytes
    assert store.verify() == []


@pytest.mark.parametrize("case", ["good", *sorted(bad_records())])
def test_a_batch_of_one_record_is_checked_as_one_of_many(case: str) -> None:
    """A batch of one record takes a shorter way through the checks (a send of one
    message to each of many topics): the same outcome as that record in a batch."""
    alone = record(b"x" * 100) if case == "good" else bad_records()[case][0]
    first = record(b"first")
    limits = (48 * 1024, 64 * 1024)
    single = check_batch(batch(alone), *limits)
    among = check_batch(batch(first, alone), *limits)
    if case == "good":
        assert single[1] == among[1] == {}
        ((position, *rest),) = single[0]
        assert position == 0 and among[0][1] == (len(first), *rest)
        small = (48 * 1024, len(alone) - 1)  # too big for a segment: refused the same way
        assert str(check_batch(batch(alone), *small)[1][0]) == str(
            check_batch(batch(first, alone), *small)[1][1]
        )
    else:
        assert single[0] == [] and [type(e) for e in single[1].values()] == [type(among[1][1])]
        assert list(single[1]) == [0] and str(single[1][0]) == str(among[1][1])
        assert [c[0] for c in among[0]] == [0]  # the first record passes


def test_a_batch_whose_records_cannot_be_told_apart_stores_nothing(make_store: MakeStore) -> None:
    store = make_store()
    good = record(b"ok")
    for records, count in (
        (good + patched(good, TOTAL_SIZE_OFFSET, 5), 2),
        (good + good[:-1], 2),
        (good + good, 3),
        (good + good + b"!", 2),
        # One record: its total size must be all the bytes (a shorter way checks that).
        (patched(good, TOTAL_SIZE_OFFSET, len(good) + 5), 1),
        (patched(good, TOTAL_SIZE_OFFSET, len(good) - 1), 1),
        (good + b"!", 1),
        (good[:-1], 1),
        (good[:40], 1),
    ):
        results = store.put_messages(RecordBatch(records, count, TOPIC, 1))
        assert [r.status for r in results] == [PutStatus.MESSAGE_ILLEGAL] * count
        assert all("records" in r.error for r in results)
    assert store.commitlog.max_offset == 0


@pytest.mark.parametrize(
    "topic, queue_id, reason", [("bad/topic", 0, "topic"), (TOPIC, 100_000, "queue_id")]
)
def test_a_bad_topic_or_queue_refuses_the_whole_batch(
    make_store: MakeStore, topic: str, queue_id: int, reason: str
) -> None:
    store = make_store()
    results = store.put_messages(RecordBatch(record(topic=topic), 1, topic, queue_id))
    assert results[0].status is PutStatus.MESSAGE_ILLEGAL and reason in results[0].error
    assert store.commitlog.max_offset == 0


def test_raw_records_cross_segments_and_survive_a_restart(make_store: MakeStore) -> None:
    store = make_store()
    body = b"y" * 3000  # 64 KiB segments: a 40-record batch needs two of them
    results = store.put_messages(batch(*[record(body + bytes([i])) for i in range(40)]))
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert {r.commitlog_offset // (64 * 1024) for r in results} == {0, 1}
    assert [r.queue_offset for r in results] == list(range(40))
    root = store.config.root_dir
    store.shutdown()
    again = make_store(root)
    assert again.verify() == []
    assert again.wait_dispatched()
    got = again.get_messages(TOPIC, 1, 0, 40)
    assert [bytes(m.body) for m in got.messages] == [body + bytes([i]) for i in range(40)]
    assert [m.queue_offset for m in got.messages] == list(range(40))


def test_prepared_transaction_records_are_stored_but_not_queued(make_store: MakeStore) -> None:
    store = make_store()
    prepared = patched(record(b"tx"), SYS_FLAG_OFFSET, SYS_FLAG_TRANSACTION_PREPARED)
    results = store.put_messages(batch(prepared, record(b"plain")))
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 2
    assert stored_bodies(store) == [b"plain"]
    view = store.look_message(results[0].commitlog_offset)
    assert view is not None and bytes(view.body) == b"tx"


def test_an_ipv6_producer_gets_its_records_re_encoded(make_store: MakeStore) -> None:
    store = make_store()
    results = store.put_messages(
        batch(record(b"six", tags="A"), record(b"x", topic="Other"), record(b"seven")), ("::1", 9)
    )
    assert [r.status for r in results] == [
        PutStatus.PUT_OK,
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.PUT_OK,
    ]
    view = store.look_message(results[0].commitlog_offset)
    assert view is not None
    assert (view.born_host, view.tags, bytes(view.body)) == ("[::1]:9", "A", b"six")
    assert stored_bodies(store) == [b"six", b"seven"]
    assert store.verify() == []


def test_a_stopped_store_refuses_a_raw_batch(make_store: MakeStore) -> None:
    store = make_store()
    store.shutdown()
    results = store.put_messages(batch(record(), record()))
    assert [r.status for r in results] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2


def test_raw_batch_results_carry_a_flush_timeout_to_every_stored_record(
    make_store: MakeStore,
) -> None:
    """A raw batch's results are kept as columns (StoredRun); a timeout marks each stored
    record, refused ones keep their own status, and every field still reads per record."""
    store = make_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=0)
    bad = patched(record(b"x"), MAGIC_OFFSET, 0x12345678)
    for _ in range(50):  # a flush may finish within the zero timeout: try a few batches
        results = store.put_messages(batch(record(b"a"), bad, record(b"b")))
        if results[0].status is PutStatus.FLUSH_DISK_TIMEOUT:
            break
    assert [r.status for r in results] == [
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.FLUSH_DISK_TIMEOUT,
    ]
    stored = [results[0], results[2]]
    assert stored[1].queue_offset == stored[0].queue_offset + 1
    for result, body in zip(stored, (b"a", b"b"), strict=True):
        view = store.look_message(result.commitlog_offset)
        assert view is not None and bytes(view.body) == body
        assert view.msg_id == result.msg_id and view.store_size == result.wrote_bytes
