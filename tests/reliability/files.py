"""An independent reader of a store's files: the record decoder over raw bytes.

The fault tests check their invariants here rather than only through the
store's API: this module reads ``commitlog/`` segment files and
``consumequeue/`` files with plain ``read_bytes`` and the record decoder, none
of the store's CommitLog, MappedFile or recovery code, so a bug there cannot
hide itself. File formats are documented in :mod:`boltmq.wire.record` and
:mod:`services.store.consume_queue`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    MAGIC_BLANK,
    TOTAL_AND_MAGIC,
    CorruptRecord,
    decode_record,
)
from services.store.consume_queue import ENTRY, ENTRY_SIZE


@dataclass(frozen=True)
class StoredRecord:
    """One CommitLog record as the files hold it (CRC checked)."""

    commitlog_offset: int
    total_size: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes

    @property
    def end(self) -> int:
        return self.commitlog_offset + self.total_size


@dataclass
class CommitLogScan:
    """Every whole, CRC-valid record from the first segment to the first gap or damage."""

    records: list[StoredRecord]
    damage: str = ""
    """Why the scan stopped before the end of the data ('' at unwritten space)."""

    def bodies(self) -> Counter[bytes]:
        """How often each body is stored."""
        return Counter(r.body for r in self.records)

    def by_queue(self) -> dict[tuple[str, int], list[StoredRecord]]:
        """Records per (topic, queue id), in CommitLog order."""
        queues: dict[tuple[str, int], list[StoredRecord]] = {}
        for r in self.records:
            queues.setdefault((r.topic, r.queue_id), []).append(r)
        return queues


def segment_paths(root: Path) -> list[Path]:
    """The CommitLog segment files, oldest first."""
    directory = root / "commitlog"
    return sorted(p for p in directory.iterdir() if p.name.isdigit()) if directory.is_dir() else []


def scan_commitlog(root: Path) -> CommitLogScan:
    """Decode every record of ``root``'s CommitLog, segment by segment."""
    scan = CommitLogScan([])
    for path in segment_paths(root):
        data = memoryview(path.read_bytes())
        base = int(path.name)
        position = 0
        while position + BLANK_MARKER_SIZE <= len(data):
            total, magic = TOTAL_AND_MAGIC.unpack_from(data, position)
            if magic == MAGIC_BLANK:
                break
            if total == 0 and magic == 0:
                return scan  # unwritten space: the end of the data
            try:
                view = decode_record(data, position, check_crc=True)
            except CorruptRecord as exc:
                scan.damage = f"{path.name}: {exc}"
                return scan
            if view.commitlog_offset != base + position:
                scan.damage = f"{path.name}@{position}: record says offset {view.commitlog_offset}"
                return scan
            scan.records.append(
                StoredRecord(
                    base + position,
                    view.total_size,
                    view.topic,
                    view.queue_id,
                    view.queue_offset,
                    view.body_bytes(),
                )
            )
            position += view.total_size
    return scan


def queue_entries(root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """``(commitlog_offset, size, tags_code)`` of every written entry, from the first file."""
    directory = root / "consumequeue" / topic / str(queue_id)
    entries: list[tuple[int, int, int]] = []
    for path in sorted(p for p in directory.iterdir() if p.name.isdigit()):
        data = path.read_bytes()
        for at in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            entry = ENTRY.unpack_from(data, at)
            if entry[0] < 0 or entry[1] <= 0:
                return entries
            entries.append(entry)
    return entries


def exactly_once(acknowledged: Iterable[bytes], scan: CommitLogScan) -> list[str]:
    """Problems: acknowledged bodies stored zero or several times (empty when none)."""
    stored = scan.bodies()
    problems = []
    for body in acknowledged:
        count = stored.get(body, 0)
        if count != 1:
            problems.append(f"acknowledged {body[:40]!r} stored {count} times")
    return problems


def queues_in_order(scan: CommitLogScan) -> list[str]:
    """Problems: a queue whose records' queue offsets are not 0.. (or min..) consecutive."""
    problems = []
    for (topic, queue_id), records in scan.by_queue().items():
        offsets = [r.queue_offset for r in records]
        expected = list(range(offsets[0], offsets[0] + len(offsets)))
        if offsets != expected:
            problems.append(
                f"{topic}/{queue_id}: queue offsets {offsets[:10]}... are not consecutive"
            )
    return problems
