"""Compressed bodies in records: the producer's encoding, the store's checks, the inflate.

A body over the threshold is stored zlib-compressed with RocketMQ's COMPRESSED | ZLIB
sys-flag bits (0x301); the body CRC and length are those of the stored bytes, so the
store checks and keeps the record as any other; a consumer's view inflates it, and a
body that does not inflate is a CorruptBody naming why.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable

import pytest

from boltmq import Message
from boltmq.wire.body_compression import (
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    ZLIB_SYS_FLAG,
    CorruptBody,
    InflatingRecordView,
    compress_body,
    inflate_body,
    inflating,
)
from boltmq.wire.pulled_records import decode_pulled
from boltmq.wire.record import (
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_OFFSET,
    RecordView,
    body_crc,
    decode_records,
)
from boltmq.wire.record_batch import RecordBatch, send_record_parts
from services.store import MessageStore
from services.store.status import PutStatus

TOPIC = "Zipped"
LONG = b"the same words again and again " * 400  # 12,400 bytes, compressible
MakeStore = Callable[..., MessageStore]


def test_rocketmq_bits() -> None:
    assert (ZLIB_SYS_FLAG, COMPRESSION_LZ4, COMPRESSION_ZSTD) == (0x301, 0x100, 0x200)


def test_only_bodies_over_the_threshold_that_shrink_are_compressed() -> None:
    assert compress_body(LONG, 4096) == (zlib.compress(LONG, 5), ZLIB_SYS_FLAG)
    assert compress_body(LONG[:4096], 4096) == (LONG[:4096], 0)  # not over: as it is
    noise = random.Random(7).randbytes(5000)  # zlib makes it longer: sent as it is
    assert compress_body(noise, 16) == (noise, 0)
    assert compress_body(LONG, 0) == (LONG, 0)  # 0: never


def test_a_send_record_carries_the_compressed_body_its_crc_and_the_bits() -> None:
    head, body, tail = send_record_parts(TOPIC, LONG, "T", compress_over=4096)
    assert body == zlib.compress(LONG, 5) and len(body) < len(LONG) // 10
    (record,) = decode_records(memoryview(head + body + tail))
    assert record.sys_flag == ZLIB_SYS_FLAG
    assert record.body_crc == body_crc(body)  # the CRC covers the stored bytes
    assert record.total_size == len(head + body + tail)
    (view,) = inflating([record])
    assert isinstance(view, InflatingRecordView)
    assert bytes(view.body) == LONG and bytes(view.stored_body) == body
    assert view.tags == "T" and view.body_bytes() == LONG


def test_message_paths_compress_over_the_threshold_only() -> None:
    short, long = Message(topic=TOPIC, body=b"tiny"), Message(topic=TOPIC, body=LONG)
    records = decode_records(memoryview(short.to_record(compress_over=4096) + long.to_record()))
    assert [r.sys_flag for r in records] == [0, 0]  # no threshold given: never
    mixed = decode_records(
        memoryview(short.to_record(compress_over=4096) + long.to_record(compress_over=4096))
    )
    assert [r.sys_flag for r in mixed] == [0, ZLIB_SYS_FLAG]
    plain, inflated = inflating(mixed)
    assert not isinstance(plain, InflatingRecordView)
    assert (bytes(plain.body), bytes(inflated.body)) == (b"tiny", LONG)


def test_the_store_takes_a_compressed_record_and_keeps_its_bytes(make_store: MakeStore) -> None:
    store = make_store()
    raw = b"".join(send_record_parts(TOPIC, LONG, compress_over=4096))
    (result,) = store.put_messages(RecordBatch(raw, 1, TOPIC, 0), ("10.0.0.1", 1))
    assert result.status is PutStatus.PUT_OK
    stored = store.look_message(result.commitlog_offset)
    assert stored is not None
    assert stored.sys_flag == ZLIB_SYS_FLAG and bytes(stored.body) == zlib.compress(LONG, 5)
    assert stored.total_size < len(LONG) // 10
    assert store.verify() == []  # the CRC check of the stored (compressed) bytes passes


@pytest.mark.parametrize(
    ("body", "flag", "reason"),
    [
        (b"\x78\x9cnot zlib", ZLIB_SYS_FLAG, "does not inflate"),
        (zlib.compress(LONG)[:50], ZLIB_SYS_FLAG, "does not inflate"),
        (b"anything", SYS_FLAG_COMPRESSED | COMPRESSION_LZ4, "compressed with LZ4"),
        (b"anything", SYS_FLAG_COMPRESSED | COMPRESSION_ZSTD, "compressed with ZSTD"),
        (b"anything", SYS_FLAG_COMPRESSED | (5 << 8), "type 5: only zlib"),
    ],
)
def test_a_body_that_does_not_inflate_is_a_corrupt_body(
    body: bytes, flag: int, reason: str
) -> None:
    with pytest.raises(CorruptBody, match=reason):
        inflate_body(body, flag)
    head, stored, tail = send_record_parts(TOPIC, body)
    patched = bytearray(head)
    struct.pack_into(">i", patched, SYS_FLAG_OFFSET, flag)
    (view,) = inflating(decode_records(memoryview(bytes(patched) + stored + tail)))
    with pytest.raises(CorruptBody, match=reason):
        _ = view.body
    assert view.topic == TOPIC  # the rest of the message reads


def test_the_compressed_bit_alone_means_zlib() -> None:
    assert inflate_body(zlib.compress(b"older writers"), SYS_FLAG_COMPRESSED) == b"older writers"
    assert inflate_body(b"plain", 0) == b"plain"


@pytest.mark.parametrize("count", [3, 40])  # one record at a time, and checked in bulk
def test_a_pull_decoded_with_inflate_wraps_only_its_compressed_records(count: int) -> None:
    squeezed = {1, count - 1}
    bodies = [LONG if n in squeezed else b"plain %d" % n for n in range(count)]
    raw = b"".join(b"".join(send_record_parts(TOPIC, body, compress_over=4096)) for body in bodies)
    records = decode_pulled(raw, inflate=True)
    assert [type(r) is InflatingRecordView for r in records] == [
        n in squeezed for n in range(count)
    ]
    assert [bytes(r.body) for r in records] == bodies
    plain = decode_pulled(raw)
    assert not any(type(r) is InflatingRecordView for r in plain)
    assert len(bytes(plain[1].body)) < len(LONG)  # as stored
    unsqueezed = b"".join(b"".join(send_record_parts(TOPIC, body)) for body in bodies)
    assert all(type(r) is RecordView for r in decode_pulled(unsqueezed, inflate=True))
