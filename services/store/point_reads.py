"""Point reads: one CommitLog record, or its store time, read through the file.

A lookup (a message by id or by key, a transaction's half message by offset) and the
binary search of offset-by-time read single records at scattered offsets, mostly of
segments whose pages the CommitLog's page-cache window released long ago
(:mod:`services.store.page_cache`). Read through the segment's mapping, the page fault
of such a record read the disk's whole read-ahead around it (``read_ahead_kb``: 8 MiB
on the disk of bench/RESULTS.md) for a record of a few hundred bytes; read with
``pread`` the kernel reads a lone small read as it is (bench/history/backlog.md,
"Point reads through the file"). A segment's mapping keeps its normal advice: the pulls
read it in order and want the read-ahead.

A record is read in one ``pread`` of :data:`FIRST_READ_BYTES` when it fits (most do),
else in a second for the rest, and decoded from those bytes: the record owns them, not
a view of a mapping that a deletion may unmap.
"""

from __future__ import annotations

from typing import Final

from boltmq.wire.record import (
    BORN_HOST_OFFSET,
    INT,
    CorruptRecord,
    RecordView,
    decode_record,
    store_timestamp_of,
)
from services.store.mapped_file import PAGE_SIZE, MappedFile

FIRST_READ_BYTES: Final = PAGE_SIZE
STORE_TIME_END: Final = BORN_HOST_OFFSET + 20 + 8
"""Where a record's store timestamp ends at the latest (after an IPv6 born host)."""


def record_at(mf: MappedFile, position: int, *, check_crc: bool) -> RecordView:
    """The record at ``position`` of a held segment (below its ``wrote_position``);
    CorruptRecord, naming the segment and position, if it is not a whole valid record."""
    room = mf.wrote_position - position
    data = mf.read_at(position, min(FIRST_READ_BYTES, room))
    if len(data) >= INT.size:
        total = INT.unpack_from(data, 0)[0]
        if len(data) < total <= room:
            data += mf.read_at(position + len(data), total - len(data))
    try:
        return decode_record(memoryview(data), 0, check_crc=check_crc)
    except CorruptRecord as exc:
        raise CorruptRecord(f"{exc} (segment {mf.path.name}, position {position})") from None


def store_time_at(mf: MappedFile, position: int) -> int | None:
    """The store timestamp of the record at ``position`` of a held segment; None when the
    segment ends before it."""
    data = mf.read_at(position, STORE_TIME_END)
    if len(data) < STORE_TIME_END:
        return None
    return store_timestamp_of(data, 0)
