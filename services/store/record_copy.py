"""RecordCopy: client-encoded records (a RecordBatch) checked and copied into CommitLog segments.

A producer may send its records already encoded (:mod:`boltmq.wire.record_batch`).
The CommitLog then neither decodes nor re-encodes them:

1. :func:`check_records` verifies every record (framing, CRC, properties,
   sizes) before anything is written; a refused record gets its own
   MESSAGE_ILLEGAL or PROPERTIES_SIZE_EXCEEDED result, the others go on.
2. Under the CommitLog's append lock (:meth:`services.store.commitlog.CommitLog.append_records`,
   or ``append_record_batches`` for several batches in one hold) each batch's
   checked records are copied in one of two ways (:func:`copy_batch`):

   - :func:`stamp_bulk`, the common batch (every record good and consumable,
     all of it fitting in the current segment; :func:`fits_bulk`): one copy,
     every head stamped with one numpy scatter (:func:`stamp_heads`), and the dispatch requests as
     one :class:`~services.store.dispatch_run.DispatchRun`;
   - :func:`copy_records`, anything else: the records are held in the call's
     :class:`SegmentWrites`, and every batch of the call that lands in one
     segment is written with it: runs of adjacent records copied into one
     buffer, every record patched there with one ``pack_into`` (queue and
     physical offsets, hosts, store time), one pwrite. A batch that reaches a
     segment's end closes it with a blank marker and goes on in the next.

Readers never see an unpatched record: the write position moves only after
the patches, once for all the records of a call in a segment.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import TypeGuard

import numpy as np

from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    SCHEDULE_TOPIC,
    SHORT,
    InvalidMessage,
    decode_properties,
    scheduled_tags_code,
)
from boltmq.wire.record_batch import (
    H_BODY_LEN,
    H_BORN_TS,
    H_FLAG,
    H_SYS_FLAG,
    PATCH,
    PATCH_OFFSET,
    RAW_HEAD,
    Checked,
    MalformedBatch,
    PropertiesTooLarge,
    RecordBatch,
)
from boltmq.wire.record_encoding import blank_marker, encode_topic
from boltmq.wire.record_heads import CheckedColumns, Int64s, byte_windows, check_batch
from boltmq.wire.topic import validate_topic
from services.store.config import StoreConfig
from services.store.dispatch_run import DispatchRun, DispatchTuple
from services.store.mapped_file import MappedFile
from services.store.mapped_file_queue import MappedFileQueue
from services.store.status import PutResult, PutStatus, StoredRun, create_failed

Fixed = tuple[int, bytes, bytes, int]
"""What every record of a batch gets alike: (queue_id, born_host, store_host, now_ms)."""
RecordsAppend = tuple[bytes, Sequence[Checked], str, int, bytes]
"""One checked batch to append: (records, checked, topic, queue_id, born_host)."""


def check_records(
    batch: RecordBatch, config: StoreConfig, max_record_size: int
) -> tuple[Sequence[Checked], dict[int, PutResult]]:
    """Verify a client-encoded batch: the records to append, and a result for each
    refused one (by index). Nothing is written here.

    A batch whose topic or queue is invalid, or whose records cannot be told
    apart, is refused whole (MESSAGE_ILLEGAL for every record).
    """
    try:
        validate_topic(batch.topic)
        queue_id = batch.queue_id
        if not 0 <= queue_id <= config.max_queue_id:
            raise InvalidMessage(f"queue_id {queue_id} must be 0..{config.max_queue_id}")
        good, bad = check_batch(batch, config.max_message_size_bytes, max_record_size)
    except (InvalidMessage, MalformedBatch) as exc:
        error = str(exc)
        return [], {
            i: PutResult(PutStatus.MESSAGE_ILLEGAL, error=error) for i in range(batch.count)
        }
    if not bad:
        return good, {}
    rejected = {
        index: PutResult(
            PutStatus.PROPERTIES_SIZE_EXCEEDED
            if isinstance(exc, PropertiesTooLarge)
            else PutStatus.MESSAGE_ILLEGAL,
            error=f"records[{index}]: {exc}",
        )
        for index, exc in bad.items()
    }
    return good, rejected


def with_delivery_codes(records: bytes, checked: Sequence[Checked], now_ms: int) -> list[Checked]:
    """Checked SCHEDULE_TOPIC_XXXX records with their delivery time as tag code."""
    topic_size = len(encode_topic(SCHEDULE_TOPIC)[0])
    out = []
    for position, total, head, code, index_keys, consumable in checked:
        start = position + RAW_HEAD.size + head[H_BODY_LEN] + topic_size + SHORT.size
        props = decode_properties(records[start : position + total])
        out.append(
            (
                position,
                total,
                head,
                scheduled_tags_code(SCHEDULE_TOPIC, props, now_ms, code),
                index_keys,
                consumable,
            )
        )
    return out


def copy_batch(
    writes: SegmentWrites,
    records: bytes,
    checked: Sequence[Checked],
    key: tuple[str, int],
    fixed: Fixed,
    queue_offsets: dict[tuple[str, int], int],
    run: StoredRun,
    parts: list[Sequence[DispatchTuple]],
) -> list[PutResult]:
    """One checked batch at ``writes``' position (under the append lock), stamped in bulk
    when :func:`fits_bulk` (what the call copied before is written first) else copied
    record by record into ``writes``; ``queue_offsets[key]`` moves on. Its dispatch
    requests go to the end of ``parts``: a bulk stamp's as a DispatchRun of their own,
    a record's into the last part when that is a list (the one-record batches of a
    call's many queues make one list, which the dispatcher walks once). Returns the
    results of the records left out when the next segment could not be created."""
    first = queue_offsets.get(key, 0)
    if type(checked) is not list and fits_bulk(checked, records, writes):
        writes.write()
        parts.append(stamp_bulk(writes.mf, records, checked, key, fixed, first, run))
        writes.end = writes.mf.wrote_position
        queue_offsets[key] = first + len(checked)
        return []
    if not parts or type(parts[-1]) is not list:
        parts.append([])
    requests = parts[-1]
    assert isinstance(requests, list)
    queue_offsets[key], failed = copy_records(
        writes, records, checked, key, fixed, first, run, requests
    )
    return failed


def fits_bulk(
    checked: Sequence[Checked], records: bytes, writes: SegmentWrites
) -> TypeGuard[CheckedColumns]:
    """Whether :func:`stamp_bulk` takes the batch: every record good and consumable, and
    all of it fits in the segment after what ``writes`` holds."""
    return (
        isinstance(checked, CheckedColumns)
        and checked.tiles(len(records))
        and bool(checked.consumable.all())
        and writes.end + len(records) + BLANK_MARKER_SIZE <= writes.mf.file_size
    )


def stamp_bulk(
    mf: MappedFile,
    records: bytes,
    checked: CheckedColumns,
    key: tuple[str, int],
    fixed: Fixed,
    first: int,
    run: StoredRun,
) -> DispatchRun:
    """The bulk copy (see :func:`fits_bulk`): queue offsets ``first ..`` in ``run``; the
    records' dispatch requests."""
    queue_id, born_host, store_host, now_ms = fixed
    position = mf.wrote_position
    count = len(checked)
    stamped = bytearray(records)
    physicals = stamp_heads(
        stamped,
        0,
        mf.file_from_offset + position,
        checked,
        queue_id,
        first,
        born_host,
        store_host,
        now_ms,
    )
    mf.write_at(position, stamped)
    mf.wrote_position = mf.committed_position = position + len(records)
    mf.store_timestamp = now_ms
    run.commitlog_offsets = physicals.tolist()
    run.queue_offsets = list(range(first, first + count))
    run.sizes = checked.totals.tolist()
    return DispatchRun(
        key[0],
        queue_id,
        first,
        physicals,
        checked.totals,
        checked.codes,
        checked.index_keys,
        checked.heads["sys_flag"],
        now_ms,
    )


def copy_records(
    writes: SegmentWrites,
    records: bytes,
    checked: Sequence[Checked],
    key: tuple[str, int],
    fixed: Fixed,
    first: int,
    run: StoredRun,
    requests: list[DispatchTuple],
) -> tuple[int, list[PutResult]]:
    """Add ``checked`` to ``writes``, a segment at a time (a full one closed with a blank
    marker), each record's results into ``run`` and its dispatch request to
    ``requests``; the next queue offset, and the results of the records left out when
    the next segment could not be created."""
    topic, queue_id = key
    born_host, now_ms = fixed[1], fixed[3]
    physicals, queue_offsets, sizes = run.commitlog_offsets, run.queue_offsets, run.sizes
    failed: list[PutResult] = []
    source = memoryview(records)
    queue_offset = first
    for source_position, total, head, code, index_keys, consumable in checked:
        if total + BLANK_MARKER_SIZE > writes.room():
            try:
                writes.roll()
            except OSError as exc:
                # Disk full or unwritable: what is written stays; the rest fails.
                failed = create_failed(len(checked) - len(physicals), exc)
                break
        if consumable:
            this_offset = queue_offset
            queue_offset += 1
        else:
            this_offset = 0
        physical = writes.add(
            source, source_position, total, head, this_offset, queue_id, born_host
        )
        physicals.append(physical)
        queue_offsets.append(this_offset)
        sizes.append(total)
        requests.append(
            (
                topic,
                queue_id,
                physical,
                total,
                code,
                now_ms,
                this_offset,
                index_keys,
                head[H_SYS_FLAG],
            )
        )
    return queue_offset, failed


class SegmentWrites:
    """The records one append copies record by record, held until they are written.

    The batches of one engine call add their records here in order; they are
    assembled and patched in memory and written with one pwrite a segment
    (:meth:`MappedFile.write_at`): when the segment fills (closed with a blank
    marker), before a bulk stamp writes at the position, and at the call's end.
    Adjacent records of one source form one run (a refused record leaves a gap).
    The write position moves once a segment's records are written and patched, so
    neither readers nor the dispatcher see part of a call's records in a segment.
    (One pwrite a batch released the GIL for each of a call's one-record batches,
    and published the position after each.)
    """

    __slots__ = ("files", "mf", "store_host", "now_ms", "end", "runs", "patches")

    def __init__(
        self, files: MappedFileQueue, mf: MappedFile, store_host: bytes, now_ms: int
    ) -> None:
        self.files = files
        self.mf = mf
        """The segment written to."""
        self.store_host = store_host
        self.now_ms = now_ms
        self.end = mf.wrote_position
        """Where the next record goes in ``mf``."""
        self.runs: list[list] = []  # [at, source, from, to]
        self.patches: list[tuple[int, tuple[int, int, int, int, int, int, bytes]]] = []
        """Where each record is, and its PATCH fields up to the store's own (queue id, flag,
        queue offset, physical offset, sys flag, born time, born host)."""

    def room(self) -> int:
        """Bytes left in the segment after what is held."""
        return self.mf.file_size - self.end

    def add(
        self,
        source: memoryview,
        source_position: int,
        total: int,
        head: tuple,
        queue_offset: int,
        queue_id: int,
        born_host: bytes,
    ) -> int:
        """Hold one record of ``source`` at the end; its CommitLog offset."""
        at = self.end
        runs = self.runs
        if runs and runs[-1][1] is source and runs[-1][3] == source_position:
            runs[-1][3] += total
        else:
            runs.append([at, source, source_position, source_position + total])
        physical = self.mf.file_from_offset + at
        born_ts = head[H_BORN_TS] or self.now_ms
        fields = (
            queue_id,
            head[H_FLAG],
            queue_offset,
            physical,
            head[H_SYS_FLAG],
            born_ts,
            born_host,
        )
        self.patches.append((at, fields))
        self.end = at + total
        return physical

    def move_to(self, mf: MappedFile) -> None:
        """Go on in ``mf`` (nothing held: the segment before was closed)."""
        assert not self.patches, "records held for a segment left behind"
        self.mf = mf
        self.end = mf.wrote_position

    def roll(self) -> None:
        """Write what is held with a blank marker closing the segment, and go on in the
        next (OSError when it cannot be created: what was held is written)."""
        self.write(blank=True)
        self.move_to(self.files.last_file_or_create())

    def write(self, *, blank: bool = False) -> None:
        """Copy, patch, write, then publish what is held (and a blank marker when
        ``blank``)."""
        if not self.patches and not blank:
            return
        mf, end, now_ms, store_host = self.mf, self.end, self.now_ms, self.store_host
        base = self.runs[0][0] if self.runs else end
        tail = blank_marker(mf.file_size - end) if blank else b""
        buf = bytearray(end - base + len(tail))
        for at, source, start, stop in self.runs:
            buf[at - base : at - base + stop - start] = source[start:stop]
        patch = PATCH.pack_into
        for at, fields in self.patches:
            patch(buf, at - base + PATCH_OFFSET, *fields, now_ms, store_host)
        buf[end - base :] = tail
        if buf:
            mf.write_at(base, buf)
        if blank:
            end = mf.file_size  # the segment is full
        mf.wrote_position = mf.committed_position = end
        mf.store_timestamp = now_ms
        self.end = end
        self.runs = []
        self.patches = []


def stamp_heads(
    target: mmap.mmap | bytearray,
    at: int,
    physical_at: int,
    checked: CheckedColumns,
    queue_id: int,
    first_queue_offset: int,
    born_host: bytes,
    store_host: bytes,
    now_ms: int,
) -> Int64s:
    """Write the heads of ``checked``, copied to ``target[at:]`` as they lay in their
    batch, with what the store decides (queue id and offsets, physical offsets, hosts,
    store time; the born time when the producer left it 0): one scatter for the batch.
    The physical offsets, ``physical_at`` being the physical offset of ``at``."""
    heads = checked.heads
    count = len(heads)
    physicals = checked.positions + physical_at
    heads["queue_id"] = queue_id
    heads["queue_offset"] = np.arange(
        first_queue_offset, first_queue_offset + count, dtype=np.int64
    )
    heads["commitlog_offset"] = physicals
    born = heads["born_timestamp"]
    born[born == 0] = now_ms
    heads["born_host"] = np.void(born_host)
    heads["store_timestamp"] = now_ms
    heads["store_host"] = np.void(store_host)
    size = int(checked.positions[-1] + checked.totals[-1])
    data = np.frombuffer(target, dtype=np.uint8, count=size, offset=at)
    byte_windows(data, RAW_HEAD.size, writeable=True)[checked.positions] = heads.view(
        np.uint8
    ).reshape(count, RAW_HEAD.size)
    return physicals
