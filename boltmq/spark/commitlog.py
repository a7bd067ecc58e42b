"""``boltmq-commitlog``: a store directory's CommitLog segments as a DataFrame.

No service is needed: each task maps one segment read-only (``mmap``,
``ACCESS_READ``) and walks its records with the store's own decoder
(:mod:`services.store.record`). The store's lock is not taken, so a stopped
store and a running one read the same way; segments are only read.

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

import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from boltmq.spark.errors import CorruptCommitLog, OptionError
from boltmq.spark.options import option_bool, option_text
from boltmq.spark.schema import (
    BATCH_ROWS_MAX,
    COMMITLOG_COLUMNS,
    CORRUPT_COLUMN,
    RowBuffer,
    arrow_schema,
)
from services.store.mapped_file import FILE_NAME_DIGITS
from services.store.record import (
    BLANK_MARKER_SIZE,
    MAGIC_BLANK,
    MESSAGE_MAGICS,
    CorruptRecord,
    body_crc,
    decode_record,
    read_total_and_magic,
    store_timestamp_of,
)

TIME_MAX_MS = 1 << 62


@dataclass
class RecordFilter:
    """The filters Spark pushed down, applied exactly (Spark does not apply them again)."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    store_from_ms: int = 0
    """Inclusive lower bound of store_timestamp."""
    store_until_ms: int = TIME_MAX_MS
    """Exclusive upper bound of store_timestamp."""

    def accepts_time(self, store_ms: int) -> bool:
        return self.store_from_ms <= store_ms < self.store_until_ms


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(value: datetime) -> int:
    """Milliseconds of a pushed timestamp value (UTC when it carries no zone)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(milliseconds=1)


def _intersect(old: frozenset | None, new: Iterable[Any]) -> frozenset:  # type: ignore[type-arg]
    values = frozenset(new)
    return values if old is None else old & values


def push(wanted: RecordFilter, item: Filter) -> bool:
    """Fold ``item`` into ``wanted``; False when this reader cannot apply it."""
    attribute: tuple[str, ...] = getattr(item, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else None
    value: Any = getattr(item, "value", None)
    if column == "topic" and isinstance(item, EqualTo | In):
        values = [value] if isinstance(item, EqualTo) else list(value)
        wanted.topics = _intersect(wanted.topics, values)
        return True
    if column == "queue_id" and isinstance(item, EqualTo | In):
        values = [value] if isinstance(item, EqualTo) else list(value)
        wanted.queue_ids = _intersect(wanted.queue_ids, values)
        return True
    if column != "store_timestamp" or not isinstance(
            item, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
        return False
    if not isinstance(value, datetime) or value.microsecond % 1000:
        return False  # sub-millisecond bounds: leave them to Spark
    ms = _ms(value)
    if isinstance(item, EqualTo | GreaterThanOrEqual):
        wanted.store_from_ms = max(wanted.store_from_ms, ms)
    if isinstance(item, GreaterThan):
        wanted.store_from_ms = max(wanted.store_from_ms, ms + 1)
    if isinstance(item, EqualTo | LessThanOrEqual):
        wanted.store_until_ms = min(wanted.store_until_ms, ms + 1)
    if isinstance(item, LessThan):
        wanted.store_until_ms = min(wanted.store_until_ms, ms)
    return True


class SegmentPartition(InputPartition):
    """One CommitLog segment file."""

    def __init__(self, path: str, start_offset: int) -> None:
        super().__init__((path, start_offset))
        self.path = path
        self.start_offset = start_offset


def segment_files(root: str) -> list[Path]:
    """The segments of a store root (or of a ``commitlog`` directory), oldest first."""
    base = Path(root)
    directory = base / "commitlog" if (base / "commitlog").is_dir() else base
    if not directory.is_dir():
        raise OptionError(f"boltmq-commitlog: {root!r} is not a store directory (expected "
                          f"<root>/commitlog/ with segment files)")
    files = sorted(p for p in directory.iterdir()
                   if len(p.name) == FILE_NAME_DIGITS and p.name.isdigit() and p.is_file())
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


def plan_segments(root: str, wanted: RecordFilter) -> list[SegmentPartition]:
    """One partition per segment, minus segments wholly outside the store-time filter.

    A segment's records lie between its first record's store time and the next
    segment's first record's (store times grow along the CommitLog).
    """
    files = segment_files(root)
    if wanted.store_from_ms == 0 and wanted.store_until_ms == TIME_MAX_MS:
        return [SegmentPartition(str(p), int(p.name)) for p in files]
    firsts = [first_store_ms(p) for p in files]
    parts = []
    for index, path in enumerate(files):
        begin = firsts[index]
        after = next((t for t in firsts[index + 1:] if t is not None), None)
        if begin is not None and begin >= wanted.store_until_ms:
            continue
        if after is not None and after < wanted.store_from_ms:
            continue
        parts.append(SegmentPartition(str(path), int(path.name)))
    return parts


def read_segment(partition: SegmentPartition, spark_schema: Any, wanted: RecordFilter, *,
                 include_body: bool, mark_corrupt: bool) -> Iterator[Any]:
    """The segment's records as Arrow batches (see the module docstring for damage)."""
    rows = RowBuffer(arrow_schema(spark_schema), None, include_body=include_body,
                     commitlog_extras=True, corrupt_column=mark_corrupt)
    size = os.path.getsize(partition.path)
    if size < BLANK_MARKER_SIZE:
        return
    with open(partition.path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
    # Not closed explicitly: records hold views into the mapping until their batch
    # is built; the mapping goes when the last view does (closing it early would
    # raise BufferError).
    for record, corrupt in _records(memoryview(mapped), partition, wanted, mark_corrupt):
        rows.add(record, corrupt)
        if len(rows) >= BATCH_ROWS_MAX:
            yield rows.take()
    if len(rows):
        yield rows.take()


def _records(view: memoryview, partition: SegmentPartition, wanted: RecordFilter,
             mark_corrupt: bool) -> Iterator[tuple[Any, bool]]:
    """``(record, crc_bad)`` for the segment's records that pass ``wanted``."""
    size = len(view)
    position = 0
    topics, queue_ids = wanted.topics, wanted.queue_ids
    where = Path(partition.path).name
    while position + BLANK_MARKER_SIZE <= size:
        total, magic = read_total_and_magic(view, position)
        if magic == MAGIC_BLANK or (total == 0 and magic == 0):
            return
        offset = partition.start_offset + position
        try:
            record = decode_record(view, position, check_crc=False)
        except CorruptRecord as exc:
            raise CorruptCommitLog(f"segment {where}: no valid record at commitlog offset "
                                   f"{offset} ({exc})") from None
        if record.commitlog_offset != offset:
            raise CorruptCommitLog(f"segment {where}: the record at commitlog offset {offset} "
                                   f"says it is at {record.commitlog_offset}")
        position += total
        if topics is not None and record.topic not in topics:
            continue
        if queue_ids is not None and record.queue_id not in queue_ids:
            continue
        if not wanted.accepts_time(record.store_timestamp):
            continue
        crc_bad = body_crc(record.body) != record.body_crc
        if crc_bad and not mark_corrupt:
            raise CorruptCommitLog(f"segment {where}: body CRC mismatch at commitlog offset "
                                   f"{offset} (topic {record.topic}, queue {record.queue_id}, "
                                   f"queue offset {record.queue_offset}); read with "
                                   f"corruptRecords=mark to see such records flagged")
        yield record, crc_bad


class CommitLogReader(DataSourceReader):
    """Batch reader of one store directory."""

    def __init__(self, root: str, schema: Any, *, include_body: bool,
                 mark_corrupt: bool) -> None:
        self.root = root
        self.schema = schema
        self.include_body = include_body
        self.mark_corrupt = mark_corrupt
        self.wanted = RecordFilter()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for item in filters:
            if not push(self.wanted, item):
                yield item

    def partitions(self) -> Sequence[InputPartition]:
        return plan_segments(self.root, self.wanted)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SegmentPartition)
        return read_segment(partition, self.schema, self.wanted, include_body=self.include_body,
                            mark_corrupt=self.mark_corrupt)


class CommitLogDataSource(DataSource):
    """``spark.read.format("boltmq-commitlog").load(store_dir)``.

    Options: ``includeBody`` (true), ``corruptRecords`` (``fail`` or ``mark``).
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
            raise OptionError("boltmq-commitlog needs a store directory: "
                              "spark.read.format('boltmq-commitlog').load('/path/to/store')")
        return CommitLogReader(root, schema, include_body=option_bool(self.options, "includeBody",
                                                                True),
                               mark_corrupt=self._mark())
