"""The CommitLog record encoded straight from its documented table, for the record tests.

Expected bytes come from :func:`spec_record`, an encoder written here from the
table in docs/store-format.md (stdlib ``struct``, ``zlib`` and ``ipaddress``
only), so the store's encoder and decoder are checked against the documented
format rather than against themselves. :func:`java_hash_reference` is Java's
``String.hashCode()`` over UTF-16 code units, written independently of
:func:`boltmq.wire.record.java_string_hash`.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib

from boltmq.wire.record import RecordView, decode_record

STORE_PORT = 10911  # StoreConfig's default store port


def spec_host(host: str, port: int) -> bytes:
    """The record's host field: 4 or 16 address bytes + 4-byte port."""
    return ipaddress.ip_address(host).packed + struct.pack(">i", port)


def spec_properties(properties: dict[str, str]) -> bytes:
    """The properties field: ``key\\x01value\\x02`` for each pair, in order, UTF-8."""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode("utf-8")


def spec_record(
    *,
    topic: str,
    body: bytes,
    properties_raw: bytes = b"",
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born: tuple[str, int] = ("127.0.0.1", 1),
    store_timestamp: int = 0,
    store: tuple[str, int] = ("127.0.0.1", 2),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """A record laid out field by field from the table in docs/store-format.md."""
    born_raw, store_raw = spec_host(*born), spec_host(*store)
    if len(born_raw) == 20:
        sys_flag |= 0x10
    if len(store_raw) == 20:
        sys_flag |= 0x20
    topic_raw = topic.encode("utf-8")
    if len(topic_raw) > 127:
        magic, topic_field = 0xDAA320AB, struct.pack(">H", len(topic_raw)) + topic_raw
    else:
        magic, topic_field = 0xDAA320A7, struct.pack(">B", len(topic_raw)) + topic_raw
    after_size = b"".join(
        (
            struct.pack(">I", magic),
            struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
            struct.pack(">i", queue_id),
            struct.pack(">i", flag),
            struct.pack(">q", queue_offset),
            struct.pack(">q", physical_offset),
            struct.pack(">i", sys_flag),
            struct.pack(">q", born_timestamp),
            born_raw,
            struct.pack(">q", store_timestamp),
            store_raw,
            struct.pack(">i", reconsume_times),
            struct.pack(">q", prepared_transaction_offset),
            struct.pack(">i", len(body)),
            body,
            topic_field,
            struct.pack(">H", len(properties_raw)),
            properties_raw,
        )
    )
    return struct.pack(">i", 4 + len(after_size)) + after_size


def java_hash_reference(text: str) -> int:
    """``String.hashCode()``: h = 31*h + unit over UTF-16 code units, as a signed int32."""
    raw = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", raw):
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def decode_bytes(raw: bytes, pos: int = 0) -> RecordView:
    """The store's decoder on ``raw`` at ``pos``, CRC checked, the body copied out."""
    return decode_record(memoryview(raw), pos, copy_body=True)
