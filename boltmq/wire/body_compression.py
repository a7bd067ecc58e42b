"""Body compression: what the COMPRESSED sys flag and the compression-type bits mean.

A producer compresses a body longer than its threshold
(``ProducerOptions.compress_body_over``, 4 KiB by default, RocketMQ's
``compressMsgBodyOverHowmuch``) with zlib and sets, in the record's sys_flag,
the bits RocketMQ's ``MessageSysFlag`` uses:

Bits      | Mask    | Meaning
----------+---------+-------------------------------------------------------
0         | 0x1     | SYS_FLAG_COMPRESSED: the stored body is compressed
8..10     | 0x700   | the algorithm: 1 << 8 LZ4, 2 << 8 ZSTD, 3 << 8 ZLIB
          |         | (0 with the COMPRESSED bit: zlib, as older RocketMQ wrote)

Only zlib is written and read (the standard library's; no zstandard or lz4
dependency): a record naming LZ4 or ZSTD is refused as :class:`CorruptBody`
when its body is read. A body that zlib does not make smaller is sent as it is.

The broker and the store never look inside: they store the compressed bytes,
the body CRC is the CRC of those bytes, ``body_length`` their length, and a
broker's re-put (delay, retry, transaction commit) copies body and sys_flag
together (:data:`BODY_SYS_FLAGS`). Consumers inflate: a received message's ``body`` is the original
(:func:`inflating`), inflated when first read; a body that does not inflate
raises :class:`CorruptBody` there, in the listener (a push consumer's failure
policy then applies: reconsume later, then the DLQ) or the pull consumer's
caller.
"""

from __future__ import annotations

import zlib
from typing import Final

from boltmq.wire.record import (
    INT,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_OFFSET,
    CorruptRecord,
    RecordView,
)

COMPRESSION_TYPE_SHIFT: Final = 8
COMPRESSION_TYPE_MASK: Final = 0x7 << COMPRESSION_TYPE_SHIFT
"""RocketMQ's COMPRESSION_TYPE_COMPARATOR: the sys_flag bits naming the algorithm."""
COMPRESSION_LZ4: Final = 0x1 << COMPRESSION_TYPE_SHIFT
COMPRESSION_ZSTD: Final = 0x2 << COMPRESSION_TYPE_SHIFT
COMPRESSION_ZLIB: Final = 0x3 << COMPRESSION_TYPE_SHIFT
BODY_SYS_FLAGS: Final = SYS_FLAG_COMPRESSED | COMPRESSION_TYPE_MASK
"""The sys_flag bits that describe the body: a copy of the body (a retry, a DLQ
resend, a committed transaction) keeps them."""
ZLIB_SYS_FLAG: Final = SYS_FLAG_COMPRESSED | COMPRESSION_ZLIB
"""The sys_flag bits of a zlib-compressed body (0x301)."""
COMPRESS_LEVEL: Final = 5
"""zlib level (RocketMQ's default ``compressLevel``)."""
DEFAULT_COMPRESS_OVER: Final = 4096
"""Bodies longer than this are compressed by default (bytes)."""
_NAMES: Final = {COMPRESSION_LZ4: "LZ4", COMPRESSION_ZSTD: "ZSTD"}


class CorruptBody(CorruptRecord):
    """A compressed body that does not inflate (or names an algorithm not supported)."""


def compress_body(body: bytes, over: int) -> tuple[bytes, int]:
    """(body to store, sys_flag bits): compressed with zlib when longer than ``over``
    bytes (``over`` <= 0: never) and smaller so, else ``(body, 0)``."""
    if over <= 0 or len(body) <= over:
        return body, 0
    packed = zlib.compress(body, COMPRESS_LEVEL)
    if len(packed) >= len(body):
        return body, 0
    return packed, ZLIB_SYS_FLAG


def inflate_body(body: bytes | memoryview, sys_flag: int) -> bytes | memoryview:
    """The original body of a stored one (``body`` itself when not compressed);
    CorruptBody when it does not inflate."""
    if not sys_flag & SYS_FLAG_COMPRESSED:
        return body
    kind = sys_flag & COMPRESSION_TYPE_MASK
    if kind not in (0, COMPRESSION_ZLIB):
        raise CorruptBody(
            f"body compressed with {_NAMES.get(kind, f'type {kind >> 8}')}: only zlib is read"
        )
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise CorruptBody(f"compressed body ({len(body)} bytes) does not inflate: {exc}") from None


class InflatingRecordView(RecordView):
    """A received record whose stored body is compressed: ``body`` is the original
    (inflated on first read, then kept); ``stored_body`` the bytes as stored."""

    __slots__ = ("_inflated",)

    def __init__(self, record: RecordView) -> None:
        super().__init__(
            record._buf,
            record._at,
            record._body_at,
            record._body_end,
            record.topic,
            record._properties_at,
            record._head,
        )
        self._inflated: bytes | memoryview | None = None

    @property
    def stored_body(self) -> bytes | memoryview:
        return self._buf[self._body_at : self._body_end]

    @property
    def body(self) -> bytes | memoryview:
        """The original body; CorruptBody when the stored one does not inflate."""
        inflated = self._inflated
        if inflated is None:
            inflated = self._inflated = inflate_body(self.stored_body, self.sys_flag)
        return inflated


def original_body(record: RecordView) -> bytes | memoryview:
    """The body ``record`` was sent with, whether it came through :func:`inflating` or
    straight from a segment; CorruptBody naming the message when it does not inflate."""
    if isinstance(record, InflatingRecordView):
        stored = record.stored_body
    else:
        stored = record.body
    try:
        return inflate_body(stored, record.sys_flag)
    except CorruptBody as exc:
        raise CorruptBody(
            f"topic {record.topic} queue {record.queue_id} offset {record.queue_offset} "
            f"(commitlog {record.commitlog_offset}): {exc}"
        ) from None


def inflating(records: list[RecordView]) -> list[RecordView]:
    """``records`` with each compressed one as an :class:`InflatingRecordView`
    (the others as they are; the list itself when none is compressed)."""
    # the sys_flag read straight from the buffer: the views' heads stay unpacked (lazy)
    unpack = INT.unpack_from
    flags = [unpack(r._buf, r._at + SYS_FLAG_OFFSET)[0] for r in records]
    if not any(flag & SYS_FLAG_COMPRESSED for flag in flags):
        return records
    return [
        InflatingRecordView(record) if flag & SYS_FLAG_COMPRESSED else record
        for record, flag in zip(records, flags, strict=True)
    ]
