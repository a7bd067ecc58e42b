"""Record boundaries in CommitLog bytes: walking the segments, what HA ships, what a
replica accepts.

:func:`walk_segments` yields every record from an offset to the end of valid
data, segment by segment (recovery, the dispatcher and ``verify`` read the
CommitLog this way; :meth:`services.store.commitlog.CommitLog.walk`).

HA moves CommitLog bytes as they are (``docs/ha.md``), in chunks of whole
records so a replica can check every record before it writes a byte:

- :func:`whole_records_end` picks where a chunk read from a segment ends: at
  the last record boundary within the byte budget (always at least one
  record, however large, so a 4 MiB message never stalls replication);
- :func:`check_chunk` is the replica's acceptance test: the chunk is a run of
  valid message records (framing, body CRC, and each record's own
  ``physical_offset`` field equal to where it would land, properties that
  decode), optionally ending
  with a blank marker that ends exactly at the segment's end. A garbled,
  truncated or misaligned chunk raises :class:`~boltmq.wire.record.CorruptRecord`
  and nothing is written.

The record layout itself is documented in :mod:`boltmq.wire.record`.
"""

from __future__ import annotations

from collections.abc import Generator

from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    MAGIC_BLANK,
    MESSAGE_MAGICS,
    TOTAL_AND_MAGIC,
    CorruptRecord,
    RecordView,
    decode_record,
)
from boltmq.wire.record_batch import derive_properties
from services.store.mapped_file import MappedFile
from services.store.mapped_file_queue import MappedFileQueue


def whole_records_end(view: memoryview, position: int, limit: int, max_bytes: int) -> int:
    """End of the last whole record in ``view[position:limit]`` within ``max_bytes``.

    ``limit`` is the segment's written position. The first record is taken
    whatever its size; returns ``position`` when not even one whole record is
    there yet. Framing only: CRCs are the replica's to check.
    """
    end = position
    budget_end = position + max_bytes
    while end + BLANK_MARKER_SIZE <= limit:
        total, magic = TOTAL_AND_MAGIC.unpack_from(view, end)
        if magic != MAGIC_BLANK and magic not in MESSAGE_MAGICS or total < BLANK_MARKER_SIZE:
            break  # unwritten space or damage: stop before it
        if end + total > limit or (end > position and end + total > budget_end):
            break
        end += total
        if magic == MAGIC_BLANK:
            break
    return end


def check_chunk(data: bytes | memoryview, offset: int, segment_bytes: int) -> list[RecordView]:
    """Validate a chunk that would be written at CommitLog ``offset``; its message records.

    The records are views of ``data``, decoded once here so the caller can
    dispatch them without reading them back. Raises CorruptRecord naming the
    first problem.
    """
    view = memoryview(data)
    size = len(view)
    position = 0
    records: list[RecordView] = []
    segment_position = offset % segment_bytes
    if segment_position + size > segment_bytes:
        raise CorruptRecord(f"chunk of {size} bytes at {offset} crosses a segment boundary")
    while position < size:
        if position + BLANK_MARKER_SIZE > size:
            raise CorruptRecord(f"chunk at {offset} ends inside a record header")
        total, magic = TOTAL_AND_MAGIC.unpack_from(view, position)
        here = offset + position
        if magic == MAGIC_BLANK:
            if total != segment_bytes - (segment_position + position) or position + total != size:
                raise CorruptRecord(
                    f"blank marker of {total} bytes at {here} does not end "
                    f"the segment and the chunk"
                )
            return records
        if magic not in MESSAGE_MAGICS:
            raise CorruptRecord(f"bad magic 0x{magic:08X} at {here}")
        if total <= 0 or position + total > size:
            raise CorruptRecord(f"record at {here} of {total} bytes runs past the chunk")
        record = decode_record(view, position, check_crc=True)
        derive_properties(bytes(record.properties_raw))  # CorruptRecord if they do not decode
        if record.commitlog_offset != here:
            raise CorruptRecord(f"record at {here} says it belongs at {record.commitlog_offset}")
        position += total
        records.append(record)
    return records


def walk_segments(
    segments: MappedFileQueue, start_offset: int, *, check_crc: bool
) -> Generator[tuple[int, RecordView | None], None, None]:
    """Yield ``(offset, record)`` from ``start_offset`` to the end of valid data.

    A blank marker yields ``(offset, None)`` and moves to the next segment.
    Stops silently at zeros (unwritten space) and raises CorruptRecord at the
    first invalid record, with the offset in ``exc.offset``. Each segment is
    held while its records are yielded, so the cleaner cannot unmap it under
    the walker; a segment already being deleted ends the walk.
    """
    files = list(segments.files)
    index = 0
    while index < len(files) and files[index].file_end_offset <= start_offset:
        index += 1
    offset = start_offset
    while index < len(files):
        mf = files[index]
        if not mf.hold():
            return
        try:
            if not (yield from _walk_segment(mf, offset, check_crc)):
                return
        finally:
            mf.release()
        index += 1
        offset = mf.file_end_offset


def _walk_segment(
    mf: MappedFile, offset: int, check_crc: bool
) -> Generator[tuple[int, RecordView | None], None, bool]:
    """Records of one segment from ``offset``; True when it ended in a blank marker."""
    position = offset - mf.file_from_offset
    view = mf.view
    limit = mf.wrote_position
    while True:
        if position + BLANK_MARKER_SIZE > limit:
            if position >= limit:
                return False
            raise _corrupt(offset, "truncated record header")
        total, magic = TOTAL_AND_MAGIC.unpack_from(view, position)
        if magic == MAGIC_BLANK:
            if total != mf.file_size - position:
                raise _corrupt(offset, f"blank marker of {total} bytes at {position}")
            yield offset, None
            return True
        if total == 0 and magic == 0:
            return False
        if magic not in MESSAGE_MAGICS:
            raise _corrupt(offset, f"bad magic 0x{magic:08X}")
        if limit < position + total <= mf.file_size:
            # Raw (HA) appends ship byte ranges, so a replica's last record can
            # be partly written: not corrupt, just not all there yet.
            return False
        try:
            view_record = decode_record(view, position, check_crc=check_crc)
        except CorruptRecord as exc:
            raise _corrupt(offset, str(exc)) from None
        if view_record.commitlog_offset != offset:
            raise _corrupt(offset, f"record claims offset {view_record.commitlog_offset}")
        yield offset, view_record
        position += total
        offset += total


def _corrupt(offset: int, reason: str) -> CorruptRecord:
    exc = CorruptRecord(f"CommitLog offset {offset}: {reason}")
    exc.offset = offset  # type: ignore[attr-defined]
    return exc
