"""Record boundaries in raw CommitLog bytes: what HA ships and what a replica accepts.

HA moves CommitLog bytes as they are (DESIGN 7), in chunks of whole records
so a replica can check every record before it writes a byte:

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
