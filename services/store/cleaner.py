"""Cleaner: deletes old CommitLog segments, then the consume-queue and index files they orphan.

Rules (RocketMQ's ``CleanCommitLogService`` / ``CleanConsumeQueueService``),
applied by :meth:`Cleaner.run_once` every ``clean_resource_interval_ms``:

1. Measure the used share of the file system holding ``<root>/commitlog``
   (``<root>`` while that directory does not exist yet).
   ``disk_full`` is set while usage > ``disk_space_warning_level_ratio`` (90 %);
   the store refuses writes with SERVICE_NOT_AVAILABLE while it is set, and
   accepts them again at the first run that measures less.
2. A segment is *expired* when its last write (the store timestamp of its last
   record, or the file's mtime for a segment loaded from disk) is at least
   ``file_reserved_time_h`` old. Whether its messages were consumed does not
   matter.
3. Expired segments are deleted when the local hour is one of ``delete_when``
   ("04" or "04;16") or usage > ``disk_max_used_space_ratio`` (75 %).
   When usage > ``disk_space_clean_forcibly_ratio`` (85 %) segments are deleted
   whatever their age.
4. Deletion is always oldest first and contiguous (it stops at the first
   segment that may not go), never touches the last (written) segment, removes
   at most ``delete_files_batch_max`` segments per run and pauses
   ``delete_commitlog_files_interval_ms`` between two deletions: deleting is
   I/O heavy and would otherwise stall appends and reads.
5. Then every consume-queue file and index file whose entries all point below
   the CommitLog's new minimum offset is deleted, and each consume queue's
   minimum offset is raised past entries whose records are gone. The consume
   queues are walked only when that minimum moved since the last walk (a
   store of 4,096 quiet queues walked them all every run).
6. A deleted file still held by a reader is unlinked at once but unmapped only
   when the reader lets go, or forcibly after
   ``destroy_mapped_file_forcibly_interval_ms``; such files are destroyed again
   on every later run until they are closed.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueueTable
from services.store.mapped_file import MappedFile

if TYPE_CHECKING:  # the index is optional here; importing it only for the annotation
    from services.store.index_service import IndexService

log = logging.getLogger(__name__)

DiskUsageProbe = Callable[[Path], float]
"""Returns the used share, in percent (0..100), of the file system holding a path."""

MS_PER_HOUR = 3_600_000


def disk_usage_percent(path: Path) -> float:
    """Used share (percent) of the file system holding ``path`` (or its nearest existing parent).

    "Used" is everything this process cannot write to: total minus the space
    available to unprivileged users. Counting the root-reserved blocks as free
    (``shutil.disk_usage(...).used / total``, RocketMQ's choice) would let the
    broker hit ENOSPC at a reported ~95 % before any threshold fired.
    """
    probe = Path(path)
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    if usage.total <= 0:
        return 0.0
    return (usage.total - usage.free) * 100.0 / usage.total


@dataclass(slots=True)
class CleanReport:
    """What one cleaner run saw and did."""

    commitlog_files_deleted: int
    consume_queue_files_deleted: int
    index_files_deleted: int
    disk_used_percent: float
    """Usage measured at the start of the run (the value the rules were applied to)."""
    disk_full: bool
    """Usage was above ``disk_space_warning_level_ratio``: writes are refused."""
    reason: str
    """Why CommitLog segments were deleted: "expired at delete hour", "disk above 75%",
    "disk above 85%: forced", or "" when none were."""


class Cleaner:
    """Applies the deletion rules of the module docstring; optionally on a daemon thread."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        disk_usage: DiskUsageProbe = disk_usage_percent,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self._disk_usage = disk_usage
        self._clock = clock
        self._sleep = sleep
        self.disk_full = False
        """True while usage > disk_space_warning_level_ratio; the store refuses writes."""
        self.disk_used_percent = 0.0
        """The last usage measured."""
        self._delete_hours = frozenset(int(hour) for hour in config.delete_when.split(";"))
        self._force_after_s = config.destroy_mapped_file_forcibly_interval_ms / 1000
        # Deleted files whose mapping is still open because readers held them.
        self._pending: list[MappedFile] = []
        self._walked_min_offset = -1
        """The CommitLog minimum the consume queues were last walked for."""
        # The background thread and a direct call never run the rules at the same time.
        self._run_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pending_destroy(self) -> tuple[MappedFile, ...]:
        """Deleted (unlinked) files still mapped because a reader held them."""
        return tuple(self._pending)

    # ---------------------------------------------------------------- one run
    def run_once(self) -> CleanReport:
        """Apply every rule once; returns what was measured and deleted."""
        with self._run_lock:
            usage = self._measure()
            self._retry_pending()
            reason, predicate = self._commitlog_rule(usage)
            commitlog_deleted = self._delete_commitlog(predicate) if predicate else 0
            min_offset = self.commitlog.min_offset
            queue_deleted = self._delete_consume_queues(min_offset)
            index_deleted = 0
            if self.index is not None:
                index_deleted = self.index.delete_files_below(min_offset, self._force_after_s)
            if commitlog_deleted:
                log.info(
                    "cleaner: deleted %d CommitLog segment(s) (%s); min offset now %d",
                    commitlog_deleted,
                    reason,
                    min_offset,
                )
            return CleanReport(
                commitlog_deleted,
                queue_deleted,
                index_deleted,
                usage,
                self.disk_full,
                reason if commitlog_deleted else "",
            )

    def _measure(self) -> float:
        """Probe the disk and update ``disk_full``; logs when it flips."""
        directory = self.config.root_dir / "commitlog"
        if not directory.exists():
            directory = self.config.root_dir
        try:
            usage = float(self._disk_usage(directory))
        except OSError as exc:
            # Keep the last state rather than guess: 0 % would reopen writes on a
            # full disk, 100 % would close them on a healthy one.
            log.warning("cleaner: cannot measure disk usage of %s: %s", directory, exc)
            return self.disk_used_percent
        self.disk_used_percent = usage
        full = usage > self.config.disk_space_warning_level_ratio
        if full and not self.disk_full:
            log.warning(
                "disk usage %.1f%% is above %d%%: refusing writes until it falls",
                usage,
                self.config.disk_space_warning_level_ratio,
            )
        elif self.disk_full and not full:
            log.warning(
                "disk usage %.1f%% is back below %d%%: accepting writes",
                usage,
                self.config.disk_space_warning_level_ratio,
            )
        self.disk_full = full
        return usage

    def _commitlog_rule(self, usage: float) -> tuple[str, Callable[[MappedFile], bool] | None]:
        """Why segments may go this run, and which ones (None: none may)."""
        config = self.config
        now_s = self._clock()
        if usage > config.disk_space_clean_forcibly_ratio:
            return f"disk above {config.disk_space_clean_forcibly_ratio}%: forced", _any_file
        oldest_kept_ms = int(now_s * 1000) - int(config.file_reserved_time_h * MS_PER_HOUR)

        def expired(mf: MappedFile) -> bool:
            return last_modified_ms(mf) <= oldest_kept_ms

        if usage > config.disk_max_used_space_ratio:
            return f"disk above {config.disk_max_used_space_ratio}%", expired
        if time.localtime(now_s).tm_hour in self._delete_hours:
            return "expired at delete hour", expired
        return "", None

    def _delete_commitlog(self, predicate: Callable[[MappedFile], bool]) -> int:
        """Delete segments oldest first while ``predicate`` holds, one at a time with pauses."""
        files = self.commitlog.files
        pause_s = self.config.delete_commitlog_files_interval_ms / 1000
        deleted = 0
        while deleted < self.config.delete_files_batch_max and _front_deletable(
            files.files, predicate
        ):
            if deleted:
                if self._stop.is_set():
                    break  # shutting down: the rest waits for the next start
                self._sleep(pause_s)
            # One file per call so the pause falls between deletions; the queue
            # re-checks the predicate and keeps the last file under its lock.
            removed = files.delete_files(predicate, 1, self._force_after_s)
            if not removed:
                break
            deleted += len(removed)
            self._track(removed)
        return deleted

    def _delete_consume_queues(self, commitlog_min_offset: int) -> int:
        """Delete consume-queue files wholly below the CommitLog and correct min offsets;
        nothing to do (no queue is walked) while the CommitLog's minimum is the one of the
        last walk: entries are written at or above it, so only its move puts any below it
        (RocketMQ's CleanConsumeQueueService skips the same way). Every queue is loaded
        and corrected when the store starts."""
        if commitlog_min_offset == self._walked_min_offset:
            return 0
        self._walked_min_offset = commitlog_min_offset
        deleted = 0
        for cq in self.queues:
            # delete_files_below only removes from the front, so the files it
            # destroyed are the first ``n`` of this snapshot.
            before = cq.files.files
            count = cq.delete_files_below(commitlog_min_offset, self._force_after_s)
            self._track(before[:count])
            cq.correct_min_offset(commitlog_min_offset)
            deleted += count
        return deleted

    def _track(self, destroyed: Iterable[MappedFile]) -> None:
        self._pending.extend(mf for mf in destroyed if not mf.closed)

    def _retry_pending(self) -> None:
        """Destroy again the files readers kept open (closes them once free or overdue)."""
        self._pending = [mf for mf in self._pending if not mf.destroy(self._force_after_s)]

    # ---------------------------------------------------------------- background
    def start(self) -> None:
        """Measure the disk now, then run every ``clean_resource_interval_ms`` on a daemon."""
        if self._thread is not None:
            raise RuntimeError("cleaner already started")
        # Measured before returning so a store started on a full disk refuses
        # its first write instead of racing the first run.
        with self._run_lock:
            self._measure()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="boltmq-cleaner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after the deletion in progress) and wait for it."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._thread = None
        self._stop.clear()

    def _loop(self) -> None:
        interval_s = self.config.clean_resource_interval_ms / 1000
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a failed run must not end cleaning for good
                log.exception("cleaner run failed")
            self._stop.wait(interval_s)


def last_modified_ms(mf: MappedFile) -> int:
    """When ``mf`` was last written: its last record's store time, else the file's mtime."""
    if mf.store_timestamp:
        return mf.store_timestamp
    try:
        return int(os.stat(mf.path).st_mtime * 1000)
    except FileNotFoundError:
        return 0  # already unlinked: as old as can be


def _any_file(mf: MappedFile) -> bool:
    return True


def _front_deletable(files: list[MappedFile], predicate: Callable[[MappedFile], bool]) -> bool:
    """Whether the oldest file may go: it is not the last one and ``predicate`` holds."""
    return len(files) > 1 and predicate(files[0])
