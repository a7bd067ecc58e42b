"""``boltmq-commitlog``: a store directory's CommitLog segments as a DataFrame.

No service is needed: each task maps one segment read-only (``mmap``,
``ACCESS_READ``) and decodes a stretch of it in bulk
(:mod:`boltmq.spark.record_columns`; anything unusual, damage included, goes
through the store's own decoder, :mod:`boltmq.wire.record`). The store's
lock is not taken, so a stopped store and a running one read the same way;
segments are only read.

Planning: the segments' data (where each one's zeros begin, :func:`data_bytes`)
is laid end to end and cut into tasks of equal bytes, at most
``maxPartitionBytes`` each (256 MiB by default), their number rounded up to a
multiple of ``minPartitions`` (2), so the last wave of ``local[2]`` keeps both
cores busy. A task reads one or more consecutive ranges of segments
(:class:`CommitLogPartition`): several small segments, or part of a large one.
Fewer, larger tasks are cheaper: Spark spends ~0.1 s of CPU to start each
Python task. A range ``[begin, end)`` of a segment holds the records
that start between the first record at or after ``begin`` and the first record
at or after ``end``. The first record after a byte position is found without
walking from the segment's start: the next magic number whose record says it
lies exactly there (its physical offset field) and fits in the segment. The
task before checks that its own walk lands exactly on that record; if it
does not (body bytes that happened to look like a record header), the query
fails saying so rather than reading a row twice or not at all.

Where data ends: a segment ends at its blank marker (``0xCBD43194``) or at the
first all-zero header (pre-allocated space not yet written).

Damage is reported, never skipped:

- bad framing (a size or magic that is not a record, a record running past the
  segment, a record whose physical offset is not where it lies) raises
  :class:`~boltmq.spark.errors.CorruptCommitLog` naming the segment file and
  the commitlog offset; nothing after it can be found without guessing.
- a body CRC mismatch raises the same by default (``corruptRecords=fail``);
  with ``corruptRecords=mark`` the record is returned with ``corrupt = true``
  and the scan goes on (the framing around it is intact).

Beside a running store, the newest segment's last record may be read while it
is being written; such a torn record is reported like any other damage.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition

from boltmq.kernel.allocator import settle_garbage_collector_once
from boltmq.spark.errors import CorruptCommitLog, OptionError
from boltmq.spark.options import option_bool, option_text, positive_int
from boltmq.spark.pushdown import TIME_MAX_MS, RecordFilter, push
from boltmq.spark.record_columns import RecordBlock, record_starts
from boltmq.spark.schema import (
    BATCH_ROWS_MAX,
    COMMITLOG_COLUMNS,
    CORRUPT_COLUMN,
    RowBuffer,
    arrow_schema,
)
from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    FIXED_OVERHEAD_IPV4,
    MAGIC_BLANK,
    MESSAGE_MAGICS,
    PHYSICAL_OFFSET_OFFSET,
    CorruptRecord,
    body_crc,
    decode_record,
    read_total_and_magic,
    store_timestamp_of,
)
from boltmq.wire.segment_name import is_segment_name

MIN_PARTITIONS_DEFAULT = 2
"""Tasks come in multiples of this (option ``minPartitions``): the last wave of local[2]
must not leave a core idle."""
PARTITION_BYTES_DEFAULT = 256 * 1024 * 1024
"""Segment bytes per task at most, unless ``maxPartitionBytes`` says otherwise."""
_MAGIC_BYTES = tuple(struct.pack(">I", magic) for magic in sorted(MESSAGE_MAGICS))
_TOTAL_MAGIC = struct.Struct(">iI")
_PHYSICAL = struct.Struct(">q")


@dataclass(frozen=True)
class SegmentRange:
    """Bytes ``[begin, end)`` of one CommitLog segment file (see the module docstring)."""

    path: str
    start_offset: int
    begin: int = 0
    end: int | None = None
    """None: to the segment's end."""


class CommitLogPartition(InputPartition):
    """One task: consecutive ranges of segments, read in order."""

    def __init__(self, ranges: Sequence[SegmentRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def plan_partitions(
    segments: Sequence[SegmentRange], used: Sequence[int], max_bytes: int, min_partitions: int
) -> list[CommitLogPartition]:
    """``segments`` (whole, ``used[i]`` bytes of data each) cut into tasks of equal bytes.

    The cuts are at ``k * total / count`` of the data laid end to end, ``count`` being
    ``ceil(total / max_bytes)`` rounded up to a multiple of ``min_partitions``. A cut
    at a segment's edge (or in its unused tail) splits nothing; the last range of a
    segment always runs to its end (``used`` is an estimate).
    """
    total = sum(used)
    count = max(1, -(-total // max_bytes))
    count = -(-count // min_partitions) * min_partitions
    cuts = sorted({total * k // count for k in range(1, count)})
    tasks: list[list[SegmentRange]] = [[] for _ in range(len(cuts) + 1)]
    base = 0
    for segment, size in zip(segments, used, strict=True):
        inside = [
            cut - base
            for cut in cuts[bisect.bisect_right(cuts, base) : bisect.bisect_left(cuts, base + size)]
        ]
        for begin, end in zip([0, *inside], [*inside, None], strict=True):
            task = bisect.bisect_right(cuts, base + begin)
            tasks[task].append(SegmentRange(segment.path, segment.start_offset, begin, end))
        base += size
    return [CommitLogPartition(ranges) for ranges in tasks if ranges]


def segment_files(root: str) -> list[Path]:
    """The segments of a store root (or of a ``commitlog`` directory), oldest first."""
    base = Path(root)
    directory = base / "commitlog" if (base / "commitlog").is_dir() else base
    if not directory.is_dir():
        raise OptionError(
            f"boltmq-commitlog: {root!r} is not a store directory (expected "
            f"<root>/commitlog/ with segment files)"
        )
    files = sorted(p for p in directory.iterdir() if is_segment_name(p.name) and p.is_file())
    if not files and directory == base:
        raise OptionError(f"boltmq-commitlog: {root!r} holds no CommitLog segment files")
    return files


def first_store_ms(path: Path) -> int | None:
    """The store timestamp of a segment's first record, None when it has none readable."""
    with open(path, "rb") as handle:
        head = handle.read(256)
    try:
        total, magic = read_total_and_magic(head, 0)
        if magic not in MESSAGE_MAGICS or total < BLANK_MARKER_SIZE:
            return None
        return store_timestamp_of(head, 0)
    except (CorruptRecord, ValueError, IndexError):
        return None


def data_bytes(path: str, page: int = 4096) -> int:
    """About where a segment's data ends: the first all-zero page of a binary search.

    Segments are pre-allocated at full size and written from the start, so the
    unwritten rest reads as zeros. Only used to place split points evenly (a
    body of zero pages can make it wrong, which costs balance, not rows).
    """
    size = os.path.getsize(path)
    low, high = 0, -(-size // page)
    with open(path, "rb") as handle:
        while low < high:
            middle = (low + high) // 2
            handle.seek(middle * page)
            if handle.read(page).count(0) == min(page, size - middle * page):
                high = middle
            else:
                low = middle + 1
    return min(low * page, size)


def plan_segments(root: str, wanted: RecordFilter) -> list[SegmentRange]:
    """Every segment, whole, minus segments wholly outside the store-time filter.

    A segment's records lie between its first record's store time and the next
    segment's first record's (store times grow along the CommitLog).
    """
    files = segment_files(root)
    if wanted.store_from_ms == 0 and wanted.store_until_ms == TIME_MAX_MS:
        return [SegmentRange(str(p), int(p.name)) for p in files]
    firsts = [first_store_ms(p) for p in files]
    parts = []
    for index, path in enumerate(files):
        begin = firsts[index]
        after = next((t for t in firsts[index + 1 :] if t is not None), None)
        if begin is not None and begin >= wanted.store_until_ms:
            continue
        if after is not None and after < wanted.store_from_ms:
            continue
        parts.append(SegmentRange(str(path), int(path.name)))
    return parts


def next_record(mapped: Any, start_offset: int, position: int) -> int:
    """The first record starting at or after ``position``; the segment's size if none.

    A candidate is a message magic whose record says it lies exactly there
    (physical offset field) and fits in the segment.
    """
    size = len(mapped)
    if position <= 0:
        return 0
    search = position + BLANK_MARKER_SIZE // 2
    while True:
        nearest = size
        for magic in _MAGIC_BYTES:  # the common magic first; the rarer one only up to it
            found = mapped.find(magic, search, nearest)
            if found >= 0:
                nearest = found
        if nearest == size:
            return size
        at = nearest - BLANK_MARKER_SIZE // 2
        if at + FIXED_OVERHEAD_IPV4 <= size:
            total, _magic = _TOTAL_MAGIC.unpack_from(mapped, at)
            physical = _PHYSICAL.unpack_from(mapped, at + PHYSICAL_OFFSET_OFFSET)[0]
            if physical == start_offset + at and FIXED_OVERHEAD_IPV4 <= total <= size - at:
                return at
        search = at + BLANK_MARKER_SIZE // 2 + 1


def read_segment(
    partition: SegmentRange,
    spark_schema: Any,
    wanted: RecordFilter,
    *,
    include_body: bool,
    mark_corrupt: bool,
) -> Iterator[Any]:
    """The range's records as Arrow batches (see the module docstring for damage)."""
    schema = arrow_schema(spark_schema)
    size = os.path.getsize(partition.path)
    if size < BLANK_MARKER_SIZE:
        return
    with open(partition.path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
    # Not closed explicitly: records hold views into the mapping until their batch
    # is built; the mapping goes when the last view does (closing it early would
    # raise BufferError).
    view = memoryview(mapped)
    data = np.frombuffer(mapped, dtype=np.uint8)
    position = next_record(mapped, partition.start_offset, partition.begin)
    until = (
        size
        if partition.end is None
        else next_record(mapped, partition.start_offset, partition.end)
    )
    where = Path(partition.path).name
    if 0 < position < until:
        _check_split(view, where, partition.start_offset, position)
    while position < until:
        starts, stop = record_starts(view, position, size, BATCH_ROWS_MAX, until)
        if not starts:
            total, magic = (
                _TOTAL_MAGIC.unpack_from(view, position)
                if position + BLANK_MARKER_SIZE <= size
                else (0, 0)
            )
            if magic == MAGIC_BLANK or (total == 0 and magic == 0):
                return  # the segment's data ends here
            # Damage: the record-by-record path names it.
            yield from _one_by_one(
                view,
                partition,
                schema,
                wanted,
                position,
                size,
                include_body=include_body,
                mark_corrupt=mark_corrupt,
            )
            return
        block = RecordBlock(data, starts)
        if block.plain and np.array_equal(
            block.heads["commitlog_offset"], partition.start_offset + block.starts
        ):
            batch = _selected(block, schema, wanted, where, mark_corrupt, include_body)
            if batch.num_rows:
                yield batch
        else:
            yield from _one_by_one(
                view,
                partition,
                schema,
                wanted,
                position,
                stop,
                include_body=include_body,
                mark_corrupt=mark_corrupt,
            )
        position = stop
    if position != until and until < size:
        raise CorruptCommitLog(
            f"segment {where}: the records do not line up with the split "
            f"at commitlog offset {partition.start_offset + until} "
            f"(a record's body looks like a record header there); read "
            f"with maxPartitionBytes of at least the segment's size"
        )


def _check_split(view: memoryview, where: str, start_offset: int, position: int) -> None:
    """The record a split starts at must decode whole, CRC included."""
    offset = start_offset + position
    try:
        decode_record(view, position, check_crc=True)
    except CorruptRecord as exc:
        raise CorruptCommitLog(
            f"segment {where}: the split at commitlog offset {offset} "
            f"starts at no valid record ({exc}): damage, or a body that "
            f"looks like a record header; read with maxPartitionBytes of "
            f"at least the segment's size"
        ) from None


def _selected(
    block: RecordBlock,
    schema: pa.Schema,
    wanted: RecordFilter,
    where: str,
    mark_corrupt: bool,
    include_body: bool,
) -> pa.RecordBatch:
    """The block's records that pass ``wanted``, CRC checked, as one batch."""
    heads = block.heads
    keep = np.ones(len(block), dtype=bool)
    if wanted.topics is not None:
        keep &= pc.is_in(
            block.topics, value_set=pa.array(sorted(wanted.topics), pa.string())
        ).to_numpy(zero_copy_only=False)
    if wanted.queue_ids is not None:
        keep &= np.isin(heads["queue_id"], np.fromiter(wanted.queue_ids, dtype=np.int64))
    if wanted.store_from_ms > 0 or wanted.store_until_ms < TIME_MAX_MS:
        stored = heads["store_timestamp"]
        keep &= (stored >= wanted.store_from_ms) & (stored < wanted.store_until_ms)
    if not keep.all():
        block = block.take(keep)
    crc_bad = block.crc_bad()
    if crc_bad.any() and not mark_corrupt:
        first = int(np.argmax(crc_bad))
        head = block.heads[first]
        _crc_failure(
            where,
            int(head["commitlog_offset"]),
            block.topics[first].as_py(),
            int(head["queue_id"]),
            int(head["queue_offset"]),
        )
    return block.to_batch(
        schema,
        None,
        include_body=include_body,
        commitlog_extras=True,
        corrupt=crc_bad if mark_corrupt else None,
    )


def _crc_failure(where: str, offset: int, topic: str, queue_id: int, queue_offset: int) -> None:
    raise CorruptCommitLog(
        f"segment {where}: body CRC mismatch at commitlog offset {offset} "
        f"(topic {topic}, queue {queue_id}, queue offset {queue_offset}); "
        f"read with corruptRecords=mark to see such records flagged"
    )


def _one_by_one(
    view: memoryview,
    partition: SegmentRange,
    schema: pa.Schema,
    wanted: RecordFilter,
    position: int,
    stop: int,
    *,
    include_body: bool,
    mark_corrupt: bool,
) -> Iterator[pa.RecordBatch]:
    """Records starting in ``[position, stop)`` decoded one at a time (the exact path)."""
    rows = RowBuffer(
        schema, None, include_body=include_body, commitlog_extras=True, corrupt_column=mark_corrupt
    )
    for record, corrupt in _records(view, partition, wanted, mark_corrupt, position, stop):
        rows.add(record, corrupt)
        if len(rows) >= BATCH_ROWS_MAX:
            yield rows.take()
    if len(rows):
        yield rows.take()


def _records(
    view: memoryview,
    partition: SegmentRange,
    wanted: RecordFilter,
    mark_corrupt: bool,
    position: int,
    stop: int,
) -> Iterator[tuple[Any, bool]]:
    """``(record, crc_bad)`` for the records starting in ``[position, stop)`` that pass
    ``wanted``."""
    size = len(view)
    topics, queue_ids = wanted.topics, wanted.queue_ids
    where = Path(partition.path).name
    while position < stop and position + BLANK_MARKER_SIZE <= size:
        total, magic = read_total_and_magic(view, position)
        if magic == MAGIC_BLANK or (total == 0 and magic == 0):
            return
        offset = partition.start_offset + position
        try:
            record = decode_record(view, position, check_crc=False)
        except CorruptRecord as exc:
            raise CorruptCommitLog(
                f"segment {where}: no valid record at commitlog offset {offset} ({exc})"
            ) from None
        if record.commitlog_offset != offset:
            raise CorruptCommitLog(
                f"segment {where}: the record at commitlog offset {offset} "
                f"says it is at {record.commitlog_offset}"
            )
        position += total
        if topics is not None and record.topic not in topics:
            continue
        if queue_ids is not None and record.queue_id not in queue_ids:
            continue
        if not wanted.accepts_time(record.store_timestamp):
            continue
        crc_bad = body_crc(record.body) != record.body_crc
        if crc_bad and not mark_corrupt:
            _crc_failure(where, offset, record.topic, record.queue_id, record.queue_offset)
        yield record, crc_bad


class CommitLogReader(DataSourceReader):
    """Batch reader of one store directory."""

    def __init__(
        self,
        root: str,
        schema: Any,
        *,
        include_body: bool,
        mark_corrupt: bool,
        partition_bytes: int | None = None,
        min_partitions: int = MIN_PARTITIONS_DEFAULT,
    ) -> None:
        self.root = root
        self.schema = schema
        self.include_body = include_body
        self.mark_corrupt = mark_corrupt
        self.partition_bytes = partition_bytes
        self.min_partitions = min_partitions
        self.wanted = RecordFilter()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for item in filters:
            if not push(self.wanted, item):
                yield item

    def partitions(self) -> Sequence[InputPartition]:
        segments = plan_segments(self.root, self.wanted)
        return plan_partitions(
            segments,
            [data_bytes(segment.path) for segment in segments],
            self.partition_bytes or PARTITION_BYTES_DEFAULT,
            self.min_partitions,
        )

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, CommitLogPartition)
        settle_garbage_collector_once()  # a Spark worker's heap (boltmq/kernel/allocator.py)
        for part in partition.ranges:
            yield from read_segment(
                part,
                self.schema,
                self.wanted,
                include_body=self.include_body,
                mark_corrupt=self.mark_corrupt,
            )


class CommitLogDataSource(DataSource):
    """``spark.read.format("boltmq-commitlog").load(store_dir)``.

    Options: ``includeBody`` (true), ``corruptRecords`` (``fail`` or ``mark``),
    ``maxPartitionBytes`` (segment bytes per task at most; 256 MiB),
    ``minPartitions`` (2: the task count is a multiple of it).
    """

    @classmethod
    def name(cls) -> str:
        return "boltmq-commitlog"

    def _mark(self) -> bool:
        mode = (option_text(self.options, "corruptRecords") or "fail").lower()
        if mode not in ("fail", "mark"):
            raise OptionError(f"option corruptRecords={mode!r}: expected fail or mark")
        return mode == "mark"

    def schema(self) -> str:
        return COMMITLOG_COLUMNS + (CORRUPT_COLUMN if self._mark() else "")

    def reader(self, schema: Any) -> DataSourceReader:
        root = option_text(self.options, "path")
        if root is None:
            raise OptionError(
                "boltmq-commitlog needs a store directory: "
                "spark.read.format('boltmq-commitlog').load('/path/to/store')"
            )
        return CommitLogReader(
            root,
            schema,
            include_body=option_bool(self.options, "includeBody", True),
            mark_corrupt=self._mark(),
            partition_bytes=positive_int(self.options, "maxPartitionBytes", None),
            min_partitions=positive_int(self.options, "minPartitions", MIN_PARTITIONS_DEFAULT)
            or MIN_PARTITIONS_DEFAULT,
        )
