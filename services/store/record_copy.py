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
     every head stamped with one numpy scatter, and the dispatch requests as
     one :class:`~services.store.dispatch_run.DispatchRun`;
   - :func:`copy_records`, anything else: runs of adjacent records go into
     the mapping with one slice assignment each, then every record is patched
     in place with one ``pack_into`` (queue and physical offsets, hosts, store
     time). A batch that reaches a segment's end closes it with a blank marker
     and goes on in the next.

Readers never see an unpatched record: the write position moves only after
the patches. (Copying the request into a bytearray to patch it before the
copy was rejected: one more copy of the whole batch; so was a slice
assignment per record.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeGuard

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
from boltmq.wire.record_heads import CheckedColumns, check_batch, stamp_heads
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


class Copied(NamedTuple):
    """What a copy did (the CommitLog keeps the queue offset and dispatches the requests)."""

    mf: MappedFile
    """The segment written last."""
    next_queue_offset: int
    requests: Sequence[DispatchTuple]
    failed: list[PutResult]
    """Results of the records left out when the next segment could not be created."""


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
    files: MappedFileQueue,
    mf: MappedFile,
    records: bytes,
    checked: Sequence[Checked],
    key: tuple[str, int],
    fixed: Fixed,
    queue_offsets: dict[tuple[str, int], int],
    run: StoredRun,
) -> Copied:
    """One checked batch from ``mf`` on (under the append lock), stamped in bulk when
    :func:`fits_bulk` else copied record by record; ``queue_offsets[key]`` moves on."""
    first = queue_offsets.get(key, 0)
    if fits_bulk(checked, records, mf):
        copied = stamp_bulk(mf, records, checked, key, fixed, first, run)
    else:
        copied = copy_records(files, mf, records, checked, key, fixed, first, run)
    queue_offsets[key] = copied.next_queue_offset
    return copied


def fits_bulk(
    checked: Sequence[Checked], records: bytes, mf: MappedFile
) -> TypeGuard[CheckedColumns]:
    """Whether :func:`stamp_bulk` takes the batch: every record good and consumable, and
    all of it fits in ``mf``."""
    return (
        isinstance(checked, CheckedColumns)
        and checked.tiles(len(records))
        and bool(checked.consumable.all())
        and mf.wrote_position + len(records) + BLANK_MARKER_SIZE <= mf.file_size
    )


def stamp_bulk(
    mf: MappedFile,
    records: bytes,
    checked: CheckedColumns,
    key: tuple[str, int],
    fixed: Fixed,
    first: int,
    run: StoredRun,
) -> Copied:
    """The bulk copy (see :func:`fits_bulk`): queue offsets ``first ..`` in ``run``."""
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
    requests = DispatchRun(
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
    return Copied(mf, first + count, requests, [])


def copy_records(
    files: MappedFileQueue,
    mf: MappedFile,
    records: bytes,
    checked: Sequence[Checked],
    key: tuple[str, int],
    fixed: Fixed,
    first: int,
    run: StoredRun,
) -> Copied:
    """Copy and patch ``checked`` from ``mf`` on, a segment at a time, into ``run``."""
    topic, queue_id = key
    now_ms = fixed[3]
    physicals, queue_offsets, sizes = run.commitlog_offsets, run.queue_offsets, run.sizes
    failed: list[PutResult] = []
    requests: list[DispatchTuple] = []
    source = memoryview(records)
    segment: _SegmentWrite | None = _SegmentWrite(mf, source, fixed)
    position = mf.wrote_position
    queue_offset = first
    for source_position, total, head, code, index_keys, consumable in checked:
        if total + BLANK_MARKER_SIZE > mf.file_size - position:
            segment.finish(position, blank=True)  # type: ignore[union-attr]
            try:
                mf = files.last_file_or_create()
            except OSError as exc:
                # Disk full or unwritable: what is written stays; the rest fails.
                failed = create_failed(len(checked) - len(physicals), exc)
                segment = None
                break
            segment = _SegmentWrite(mf, source, fixed)
            position = mf.wrote_position
        physical = mf.file_from_offset + position
        if consumable:
            this_offset = queue_offset
            queue_offset += 1
        else:
            this_offset = 0
        segment.add(  # type: ignore[union-attr]
            source_position,
            total,
            position,
            head,
            this_offset,
            physical,
        )
        position += total
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
    if segment is not None:
        segment.finish(position, blank=False)
    return Copied(mf, queue_offset, requests, failed)


class _SegmentWrite:
    """The raw records one append puts into one segment: copied run by run, then patched.

    Adjacent source records form one run (a refused record leaves a gap); the
    write position moves once, after every record of the segment is patched.
    """

    __slots__ = ("mf", "source", "fixed", "runs", "patches")

    def __init__(self, mf: MappedFile, source: memoryview, fixed: Fixed) -> None:
        self.mf = mf
        self.source = source
        self.fixed = fixed  # queue_id, born_host, store_host, now_ms
        self.runs: list[list[int]] = []  # [at, from, to]
        self.patches: list[tuple[int, int, int, int, int, int]] = []

    def add(
        self,
        source_position: int,
        total: int,
        at: int,
        head: tuple,
        queue_offset: int,
        physical: int,
    ) -> None:
        runs = self.runs
        if runs and runs[-1][2] == source_position:
            runs[-1][2] += total
        else:
            runs.append([at, source_position, source_position + total])
        self.patches.append(
            (at, head[H_FLAG], queue_offset, physical, head[H_SYS_FLAG], head[H_BORN_TS])
        )

    def finish(self, end: int, *, blank: bool) -> None:
        """Copy, patch, write, then publish up to ``end`` (and a blank marker when ``blank``).

        The records are assembled and patched in memory and written with one
        pwrite (:meth:`MappedFile.write`).
        """
        mf, source = self.mf, self.source
        base = self.runs[0][0] if self.runs else end
        tail = blank_marker(mf.file_size - end) if blank else b""
        buf = bytearray(end - base + len(tail))
        for at, start, stop in self.runs:
            buf[at - base : at - base + stop - start] = source[start:stop]
        queue_id, born_host, store_host, now_ms = self.fixed
        patch = PATCH.pack_into
        for at, flag, queue_offset, physical, sys_flag, born_ts in self.patches:
            patch(
                buf,
                at - base + PATCH_OFFSET,
                queue_id,
                flag,
                queue_offset,
                physical,
                sys_flag,
                born_ts or now_ms,
                born_host,
                now_ms,
                store_host,
            )
        buf[end - base :] = tail
        if buf:
            mf.write_at(base, buf)
        if blank:
            end = mf.file_size  # the segment is full
        if self.patches or blank:
            mf.wrote_position = mf.committed_position = end
            mf.store_timestamp = now_ms
