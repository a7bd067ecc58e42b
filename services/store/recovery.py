"""Recovery: bring CommitLog, consume queues and index back to one consistent state.

- Clean restart (no ``abort`` file): validate the last 3 CommitLog segments
  record by record (size, magic, CRC), truncate after the last valid record,
  truncate consume queues whose entries point past it, and let the dispatcher
  catch up from the furthest consume-queue entry.
- After a crash (``abort`` present): start from the newest segment whose first
  record was stored at or before ``min(physic, logics, index) - 3 s`` of the
  checkpoint, re-validate everything from there, truncate at the first invalid
  record, cut consume queues back to that start, drop index files newer than
  the checkpoint, and re-dispatch from the start.

Truncation zeroes what it cuts (see MappedFileQueue.truncate_to), so a second
crash can never resurrect stale records. Every cut is reported as a note.

The walk reads every byte from its start, gigabytes after a long run, and the
re-dispatch after it (:func:`redispatch`) reads them again: behind each, every
``RELEASE_STEP_BYTES`` and at its end, what lies more than the CommitLog's
page-cache window (:mod:`services.store.page_cache`) behind is released, so a
starting store holds no more of the CommitLog than a running one
(``released_bytes`` of the report).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from boltmq.wire.record import CorruptRecord, decode_record
from services.store.checkpoint import CheckpointState
from services.store.commitlog import CommitLog
from services.store.consume_queue import ConsumeQueueTable
from services.store.dispatcher import Dispatcher
from services.store.page_cache import PageCacheWindow

CLEAN_RECOVERY_SEGMENTS = 3
CRASH_RECOVERY_MARGIN_MS = 3_000
RELEASE_STEP_BYTES = 64 * 1024 * 1024
"""How far the walk goes between two releases behind it."""


@dataclass
class RecoveryReport:
    """What recovery found and did."""

    clean: bool
    start_offset: int = 0
    commitlog_max_offset: int = 0
    reput_offset: int = 0
    truncated_bytes: int = 0
    released_bytes: int = 0
    """Page-cache bytes released behind the walk."""
    notes: list[str] = field(default_factory=list)


def _valid_end(
    commitlog: CommitLog, start_offset: int, check_crc: bool, report: RecoveryReport
) -> tuple[int, bool]:
    """Walk from ``start_offset``: (offset past the last valid record, stopped at a bad one)."""
    end = start_offset
    corrupt = False
    release = commitlog.page_cache.release_behind
    released_at = start_offset
    try:
        for offset, record in commitlog.walk(start_offset, check_crc=check_crc):
            if record is None:
                mf = commitlog.files.find(offset)
                end = mf.file_end_offset if mf else offset
            else:
                end = offset + record.total_size
            if end - released_at >= RELEASE_STEP_BYTES:
                report.released_bytes += release(end)
                released_at = end
    except CorruptRecord as exc:
        report.notes.append(f"invalid record, cutting the CommitLog there: {exc}")
        corrupt = True
    report.released_bytes += release(end)
    return end, corrupt


def _set_end(commitlog: CommitLog, end: int, corrupt: bool, report: RecoveryReport) -> None:
    """Truncate the CommitLog at ``end`` (zeroing the rest) and set the write positions."""
    files = commitlog.files
    later = [mf.path.name for mf in files.files if mf.file_from_offset > end]
    last = files.find(end)
    cut = files.truncate_to(end)
    if corrupt or later:
        report.truncated_bytes = cut
        segment = last.path.name if last else "-"
        report.notes.append(
            f"CommitLog truncated at offset {end}: rest of segment {segment} "
            f"zeroed, later segments removed: {later or 'none'}"
        )
    last = files.last_file()
    if last is not None and last.file_from_offset <= end < last.file_end_offset:
        last.set_positions(end - last.file_from_offset)
    report.commitlog_max_offset = files.max_offset


def _first_record_timestamp(commitlog: CommitLog, index: int) -> int | None:
    mf = commitlog.files.files[index]
    try:
        return decode_record(mf.view, 0, check_crc=False).store_timestamp
    except CorruptRecord:
        return None


def _crash_start(commitlog: CommitLog, checkpoint: CheckpointState) -> int:
    """Index of the newest segment whose first record predates the checkpoint margin."""
    horizon = checkpoint.min_timestamp() - CRASH_RECOVERY_MARGIN_MS
    if checkpoint.min_timestamp() <= 0:
        return 0
    for index in range(len(commitlog.files.files) - 1, -1, -1):
        ts = _first_record_timestamp(commitlog, index)
        if ts is not None and ts <= horizon:
            return index
    return 0


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueTable,
    clean: bool,
    checkpoint: CheckpointState,
    check_crc: bool,
) -> RecoveryReport:
    """Recover in place; the caller starts the dispatcher at ``report.reput_offset``."""
    report = RecoveryReport(clean=clean)
    files = commitlog.files.files
    for cq in queues:
        cq.recover()
    if not files:
        for cq in queues:
            report.notes.extend(_cut_queue(cq, 0))
        return report
    if clean:
        start_index = max(0, len(files) - CLEAN_RECOVERY_SEGMENTS)
    else:
        start_index = _crash_start(commitlog, checkpoint)
    start = files[start_index].file_from_offset
    report.start_offset = start
    end, corrupt = _valid_end(commitlog, start, check_crc, report)
    _set_end(commitlog, end, corrupt, report)
    cut_at = end if clean else start
    for cq in queues:
        report.notes.extend(_cut_queue(cq, cut_at))
    if clean:
        furthest = max((cq.max_physical_offset for cq in queues), default=-1)
        report.reput_offset = (
            max(commitlog.min_offset, min(end, furthest)) if furthest >= 0 else commitlog.min_offset
        )
    else:
        report.reput_offset = start
    _rebuild_queue_offsets(commitlog, queues)
    return report


def redispatch(dispatcher: Dispatcher, window: PageCacheWindow) -> int:
    """Dispatch what recovery left behind, releasing behind it; bytes released."""
    start = mark = dispatcher.reput_offset
    released = 0
    while dispatcher.dispatch_once():
        if dispatcher.reput_offset - mark >= RELEASE_STEP_BYTES:
            released += window.release_between(start, dispatcher.reput_offset)
            mark = dispatcher.reput_offset
    return released + window.release_between(start, dispatcher.reput_offset)


def _cut_queue(cq, commitlog_offset: int) -> list[str]:
    cut = cq.truncate_past(commitlog_offset)
    if cut:
        return [
            f"consume queue {cq.topic}/{cq.queue_id}: {cut} entries past CommitLog offset "
            f"{commitlog_offset} removed"
        ]
    return []


def _rebuild_queue_offsets(commitlog: CommitLog, queues: ConsumeQueueTable) -> None:
    commitlog.queue_offsets = {(cq.topic, cq.queue_id): cq.max_offset() for cq in queues}


def finish_queue_offsets(commitlog: CommitLog, queues: ConsumeQueueTable) -> None:
    """After re-dispatch: the next queue offset of every queue."""
    _rebuild_queue_offsets(commitlog, queues)
