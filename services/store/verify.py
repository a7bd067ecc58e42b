"""verify(): walk CommitLog -> ConsumeQueue -> IndexFile and report every inconsistency.

Checks, each reported as one line:
- every CommitLog record up to the end of data is whole and its CRC matches;
- every dispatched, consumable record has the consume-queue entry its
  queue_offset names, pointing back at it with its size and tag code;
- every consume-queue entry points at the start of a record of its own topic,
  queue and queue offset, and queues hold no entry past the dispatched data;
- every indexed key of a dispatched record is found through the index, and the
  index files are structurally sound.

:func:`verify_directory` runs the same checks on a stopped store's directory
without changing a byte (``boltmq store verify``).

A running store keeps writing while it is verified, so :meth:`MessageStore.verify`
passes a :class:`Snapshot` taken inside the dispatcher's ``paused()`` (a copy of
``reput_offset`` and of every queue's max offset: cheap, the lock is held for
one dict copy). Only what lies below it is checked: CommitLog records below the
dispatched offset, queue entries below each queue's snapshot max offset, no queue
created later. Dispatch is not paused for the walk itself (that would stall every
consumer, and under ASYNC_FLUSH every put, for the whole walk). Two things still
move beneath a walk and are re-read before a line is reported: the cleaner may
delete a CommitLog or consume-queue segment (entries below the new minimum are
skipped), and an index file's slots are written before its header's entry count
(index problems found without the lock are checked again inside ``paused()``,
where no dispatch writes, and only those that remain are reported).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from boltmq.wire.record import CorruptRecord, decode_record
from services.store.commitlog import CommitLog, dispatch_request_of, is_consumable
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueueTable
from services.store.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, index_file_size
from services.store.index_service import IndexService

# Delayed messages keep their delivery time as tag code (docs/store-format.md, ConsumeQueue).
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
MAX_PROBLEMS = 1000


@dataclass
class Snapshot:
    """What a running store had dispatched at one instant (taken with dispatch paused)."""

    dispatched_offset: int
    queue_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    pause: Callable[[], AbstractContextManager[None]] | None = None

    @classmethod
    def of(cls, queues: ConsumeQueueTable, dispatched_offset: int) -> Snapshot:
        """A stopped store: everything up to ``dispatched_offset`` and every queue's end."""
        ends = {(cq.topic, cq.queue_id): cq.max_offset() for cq in queues}
        return cls(dispatched_offset, ends)


def verify_store(
    commitlog: CommitLog,
    queues: ConsumeQueueTable,
    index: IndexService | None,
    snapshot: Snapshot,
) -> list[str]:
    """All inconsistencies (at most MAX_PROBLEMS lines); empty when the store is sound."""
    problems: list[str] = []
    dispatched = snapshot.dispatched_offset
    end = _check_commitlog_and_queues(commitlog, queues, index, dispatched, problems)
    for cq in list(queues):
        queue_end = snapshot.queue_ends.get((cq.topic, cq.queue_id))
        if queue_end is not None:
            _check_queue(commitlog, cq, queue_end, min(end, dispatched), problems)
    if index is not None:
        problems.extend(_index_problems(index, snapshot))
    return problems[:MAX_PROBLEMS]


def _index_problems(index: IndexService, snapshot: Snapshot) -> list[str]:
    problems = index.verify_entries()
    if problems and snapshot.pause is not None:
        with snapshot.pause():
            problems = index.verify_entries()
    return problems


def _check_commitlog_and_queues(
    commitlog: CommitLog,
    queues: ConsumeQueueTable,
    index: IndexService | None,
    dispatched_offset: int,
    problems: list[str],
) -> int:
    end = commitlog.min_offset
    index_floor = index.files[0].begin_phy_offset if index is not None and index.files else None
    try:
        for offset, record in commitlog.walk(commitlog.min_offset, check_crc=True):
            if offset >= dispatched_offset:
                break  # written after the snapshot (or not dispatched): not checked
            if record is None:
                mf = commitlog.files.find(offset)
                end = mf.file_end_offset if mf else offset
                continue
            end = offset + record.total_size
            if len(problems) >= MAX_PROBLEMS:
                continue
            request = dispatch_request_of(record)
            if is_consumable(record.sys_flag):
                _check_entry_of(queues, request, problems)
            if (
                index is not None
                and request.index_keys
                and index_floor is not None
                and offset >= index_floor
            ):
                for key in request.index_keys:
                    if offset not in index.query(request.topic, key, 1 << 16, 0, 1 << 62):
                        problems.append(
                            f"index: key {request.topic}#{key} of offset {offset} not found"
                        )
    except CorruptRecord as exc:
        problems.append(f"commitlog: {exc}")
    return end


def _check_entry_of(queues: ConsumeQueueTable, request, problems: list[str]) -> None:
    where = f"{request.topic}/{request.queue_id}@{request.queue_offset}"
    cq = queues.get(request.topic, request.queue_id)
    if cq is None:
        problems.append(
            f"consume queue {request.topic}/{request.queue_id} missing for "
            f"CommitLog offset {request.commitlog_offset}"
        )
        return
    if request.queue_offset < cq.min_offset():
        return  # cleaned with its segment
    entry = cq.entry(request.queue_offset)
    if entry is None:
        problems.append(
            f"consume queue {where}: no entry for CommitLog offset {request.commitlog_offset}"
        )
        return
    physical, size, code = entry
    if physical != request.commitlog_offset or size != request.size:
        problems.append(
            f"consume queue {where}: entry ({physical}, {size}) but the record is "
            f"({request.commitlog_offset}, {request.size})"
        )
    elif code != request.tags_code and request.topic != SCHEDULE_TOPIC:
        problems.append(f"consume queue {where}: tag code {code}, record says {request.tags_code}")


def _check_queue(
    commitlog: CommitLog, cq, queue_end: int, dispatched_end: int, problems: list[str]
) -> None:
    commitlog_min = commitlog.min_offset
    for queue_offset in range(cq.min_offset(), queue_end):
        if len(problems) >= MAX_PROBLEMS:
            return
        entry = cq.entry(queue_offset)
        where = f"consume queue {cq.topic}/{cq.queue_id}@{queue_offset}"
        if entry is None:
            if queue_offset >= cq.min_offset():  # else the cleaner took it meanwhile
                problems.append(f"{where}: unreadable entry")
            continue
        physical, size, _ = entry
        if physical < commitlog_min:
            continue
        if physical < 0 or size <= 0:
            problems.append(f"{where}: empty entry inside the queue")
            continue
        if physical + size > dispatched_end:
            problems.append(
                f"{where}: points at {physical}+{size}, past the CommitLog data ({dispatched_end})"
            )
            continue
        mf = commitlog.files.find(physical)
        if mf is None:
            if physical >= commitlog.min_offset:  # else the cleaner took it meanwhile
                problems.append(f"{where}: CommitLog offset {physical} is in no segment")
            continue
        try:
            record = decode_record(mf.view, physical - mf.file_from_offset, check_crc=False)
        except CorruptRecord as exc:
            problems.append(f"{where}: no record at {physical} ({exc})")
            continue
        if (record.topic, record.queue_id, record.queue_offset, record.total_size) != (
            cq.topic,
            cq.queue_id,
            queue_offset,
            size,
        ):
            problems.append(
                f"{where}: points at a record of {record.topic}/{record.queue_id}"
                f"@{record.queue_offset} ({record.total_size} bytes)"
            )


def verify_directory(root: Path, config: StoreConfig | None = None) -> list[str]:
    """Verify a stopped store's directory without changing it.

    Raises RuntimeError when a running store holds the directory.
    """
    root = Path(root)
    if not (root / "commitlog").is_dir():
        raise FileNotFoundError(f"{root} has no commitlog/ directory: not a BoltMQ store")
    cfg = config or StoreConfig(root_dir=root)
    with offline_lock(root):
        commitlog, queues, index = open_offline(root, cfg)
        try:
            snapshot = Snapshot.of(queues, commitlog.max_offset)
            return queues.skipped_torn + verify_store(commitlog, queues, index, snapshot)
        finally:
            commitlog.close()
            queues.close()
            index.close()


@contextmanager
def offline_lock(root: Path) -> Iterator[None]:
    """Hold a shared flock on ``<root>/lock`` while reading a stopped store.

    RuntimeError when a running store holds it; no lock file means the store
    never ran, so there is nothing to take.
    """
    lock_path = root / "lock"
    fd = os.open(lock_path, os.O_RDONLY) if lock_path.exists() else -1
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(f"{root} is in use by a running store") from None
        yield
    finally:
        if fd >= 0:
            os.close(fd)


def open_offline(
    root: Path, config: StoreConfig
) -> tuple[CommitLog, ConsumeQueueTable, IndexService]:
    """Map a store's files read-only in spirit: positions from the data, nothing cut.

    Segment and queue file sizes are taken from the files themselves, so the
    caller needs no configuration. A queue with a torn file (shorter than the
    others: a crash before its flush) is not read; ``queues.skipped_torn`` names it.
    """
    segment_size = _file_size(root / "commitlog") or config.mapped_file_size_commitlog
    queue_size = _queue_file_size(root / "consumequeue") or config.consume_queue_file_size
    cfg = StoreConfig(
        root_dir=root,
        mapped_file_size_commitlog=segment_size,
        mapped_file_size_consume_queue=queue_size,
        max_hash_slot_num=config.max_hash_slot_num,
        max_index_num=config.max_index_num,
    )
    commitlog = CommitLog(cfg)
    commitlog.files.load()
    _set_commitlog_end(commitlog)
    queues = ConsumeQueueTable(root / "consumequeue", queue_size)
    queues.load(skip_torn=True)
    for cq in queues:
        cq.scan_positions()
        cq.min_logic_offset = cq.files.min_offset // 20
    index = _open_index(root, cfg)
    return commitlog, queues, index


def _open_index(root: Path, cfg: StoreConfig) -> IndexService:
    slots, entries = _index_geometry(root / "index", cfg)
    index = IndexService(root / "index", slots, entries)
    index.load(True, 0, repair=False)
    return index


def _index_geometry(directory: Path, cfg: StoreConfig) -> tuple[int, int]:
    """(hash slots, entries) of the store's index files. The files do not record
    them, and a store may have run with other settings than ``cfg`` (the tests'
    small stores do): when the first file's size does not fit ``cfg``, the
    geometry is taken from its size with RocketMQ's ratio of four entries a slot
    (its defaults, 5,000,000 and 20,000,000, and every configuration here);
    a size that fits neither keeps ``cfg`` and the load reports the file."""
    size = _file_size(directory)
    if not size or size == index_file_size(cfg.max_hash_slot_num, cfg.max_index_num):
        return cfg.max_hash_slot_num, cfg.max_index_num
    slots, rest = divmod(size - HEADER_SIZE, SLOT_SIZE + 4 * ENTRY_SIZE)
    if slots > 0 and rest == 0:
        return slots, 4 * slots
    return cfg.max_hash_slot_num, cfg.max_index_num


def _set_commitlog_end(commitlog: CommitLog) -> None:
    end = commitlog.min_offset
    try:
        for offset, record in commitlog.walk(commitlog.min_offset, check_crc=False):
            if record is None:
                mf = commitlog.files.find(offset)
                end = mf.file_end_offset if mf else offset
            else:
                end = offset + record.total_size
    except CorruptRecord:
        pass
    last = commitlog.files.last_file()
    if last is not None and last.file_from_offset <= end < last.file_end_offset:
        last.set_positions(end - last.file_from_offset)


def _file_size(directory: Path) -> int:
    if not directory.is_dir():
        return 0
    for path in sorted(directory.iterdir()):
        if path.name.isdigit():
            return path.stat().st_size
    return 0


def _queue_file_size(root: Path) -> int:
    """The size of the consume-queue files: the largest (a torn file is shorter)."""
    if not root.is_dir():
        return 0
    return max(
        (
            path.stat().st_size
            for topic_dir in root.iterdir()
            if topic_dir.is_dir()
            for queue_dir in topic_dir.iterdir()
            if queue_dir.is_dir()
            for path in queue_dir.iterdir()
            if path.name.isdigit()
        ),
        default=0,
    )
