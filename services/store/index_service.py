"""IndexService: the ordered set of index files under ``<root>/index/``.

The newest file takes new entries until it is full, then a new file named by
the current time starts (format in :mod:`services.store.index_file`); a store's
index makes that file in the background once the newest is half full
(:mod:`services.store.index_spare`). Entries
are added in CommitLog order, so a record at or below the ``end_phy_offset`` of
the newest file holding entries is already indexed; re-dispatch after recovery
relies on that to add nothing twice.

After a crash the checkpoint's ``index_msg_timestamp`` says up to when the
index was flushed: files begun after it are dropped, and the entries of the
newest remaining file stored after it are cut (recovery re-dispatches from
before that time, so they come back). Loading never deletes anything when
``repair`` is off (offline inspection and verify).

Only the newest flushed entries stay in memory: after each flush round the index's
page-cache window releases the rest (:mod:`services.store.index_window`); lookups
fault released pages back in from the files. A store's index maps its files for
random reads (``random_reads``, ``MADV_RANDOM``): a lookup reads a slot and a chain of
entries scattered over a file, and with normal advice each of its faults read the
disk's whole read-ahead around the page (``read_ahead_kb``, 8 MiB on this machine)
(bench/history/side-by-side.md, "Key lookups over released index pages"). The puts
write the newest file's slot table all over, so after a load that table is asked of the
disk in one request (``POSIX_FADV_WILLNEED``) rather than a page a fault; a new file's
table is fresh space, or was read into the page cache with the file made ahead.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from boltmq.wire.key_column import KeyColumn
from services.store.config import StoreConfig
from services.store.index_file import (
    HEADER_SIZE,
    SLOT_SIZE,
    CorruptIndexFile,
    IndexFile,
    column_key_hashes,
    index_file_name,
    index_file_size,
    key_hash,
    key_hashes,
    topics_key_hashes,
)
from services.store.index_spare import IndexSpare
from services.store.index_window import IndexPageCacheWindow
from services.store.mapped_file import fsync_dir

log = logging.getLogger(__name__)

INDEX_NAME_DIGITS = 17  # yyyyMMddHHmmssSSS
IndexEntry = tuple[str, Sequence[str], int, int]
"""One record's keys to index: (topic, keys, CommitLog offset, store timestamp)."""


class IndexService:
    """Builds and queries the hash index over CommitLog records."""

    def __init__(
        self,
        index_dir: Path,
        max_hash_slot_num: int,
        max_index_num: int,
        window_bytes: int = 0,
        *,
        make_ahead: bool = False,
        random_reads: bool = False,
    ) -> None:
        self.index_dir = index_dir
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self.files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._dir_unsynced = False
        """A file was made since the last :meth:`flush` synced the directory (under
        :attr:`_lock`)."""
        self.page_cache = IndexPageCacheWindow(window_bytes)
        """Releases the pages behind the newest ``window_bytes`` of flushed entries (0: off)."""
        self.spare = (
            IndexSpare(
                index_dir,
                index_file_size(max_hash_slot_num, max_index_num),
                HEADER_SIZE + max_hash_slot_num * SLOT_SIZE,
            )
            if make_ahead
            else None
        )
        """The next file, made in the background once the newest is half full (a store's
        index; :mod:`services.store.index_spare`)."""
        self.random_reads = random_reads
        """Map every file for random reads (a store's index; module docstring)."""

    @classmethod
    def of_store(cls, config: StoreConfig) -> IndexService:
        """The index of a store's ``index/`` directory, with its settings."""
        return cls(
            config.root_dir / "index",
            config.max_hash_slot_num,
            config.max_index_num,
            config.index_page_cache_window_bytes,
            make_ahead=True,
            random_reads=True,
        )

    # ---------------------------------------------------------------- loading
    def load(
        self, last_exit_ok: bool, checkpoint_index_ts_ms: int, *, repair: bool = True
    ) -> list[str]:
        """Open every index file; after a crash cut what the checkpoint does not cover."""
        notes: list[str] = []
        if not self.index_dir.is_dir():
            return notes
        for path in sorted(self.index_dir.iterdir()):
            if path.name.endswith(".tmp") and repair:
                path.unlink()
                notes.append(f"index: unfinished file {path.name} removed")
                continue
            if len(path.name) != INDEX_NAME_DIGITS or not path.name.isdigit():
                continue
            try:
                self.files.append(IndexFile.open_existing(path, self.max_hash_slot_num))
            except (CorruptIndexFile, ValueError, OSError) as exc:
                notes.append(f"index: file {path.name} unusable ({exc})")
                if repair:
                    path.rename(path.with_name(path.name + ".corrupt"))
                    notes[-1] += "; set aside as .corrupt"
        if not last_exit_ok and repair:
            notes.extend(self._cut_after(checkpoint_index_ts_ms))
        if self.random_reads and self.files:
            for f in self.files:
                f.mapped.read_randomly()
            # The newest file's puts write its slot table all over: read it in one
            # request instead of a fault (a disk read) a page.
            self.files[-1].mapped.read_ahead(0, self.files[-1].entries_at)
        return notes

    def _cut_after(self, timestamp_ms: int) -> list[str]:
        notes = []
        for f in list(self.files):
            if f.end_timestamp <= timestamp_ms or f.entry_count == 0:
                continue
            if f.begin_timestamp > timestamp_ms:
                self.files.remove(f)
                f.destroy(0)
                notes.append(f"index: file {f.path.name} begun after the checkpoint removed")
                continue
            dropped = f.truncate_to(f.entries_until(timestamp_ms))
            if dropped:
                notes.append(
                    f"index: {dropped} entries of {f.path.name} newer than the checkpoint cut"
                )
        return notes

    def truncate_past(self, commitlog_end: int) -> list[str]:
        """Cut entries pointing at or past ``commitlog_end`` (the recovered CommitLog end)."""
        notes = []
        for f in reversed(list(self.files)):
            if not f.entry_count or f.end_phy_offset < commitlog_end:
                break
            if f.begin_phy_offset >= commitlog_end:
                self.files.remove(f)
                f.destroy(0)
                notes.append(
                    f"index: file {f.path.name} past CommitLog offset {commitlog_end} removed"
                )
                continue
            dropped = f.truncate_to(f.entries_below(commitlog_end))
            notes.append(
                f"index: {dropped} entries of {f.path.name} past CommitLog offset "
                f"{commitlog_end} cut"
            )
        return notes

    # ---------------------------------------------------------------- writes
    def build_index(
        self, topic: str, keys: Iterable[str], commitlog_offset: int, store_ts: int
    ) -> None:
        """Index every key of one record (called by the dispatcher, in CommitLog order)."""
        files = self.files
        current = files[-1] if files else None
        if commitlog_offset <= self._indexed_end():
            return  # already indexed before a restart
        for key in keys:
            if not key:
                continue
            h = key_hash(topic, key)
            if current is None or not current.put(h, commitlog_offset, store_ts):
                current = self._roll()
                current.put(h, commitlog_offset, store_ts)
        if current is not None:
            self._ahead(current)

    def build_index_run(
        self,
        topic: str,
        keys_of_records: Sequence[tuple[str, ...]],
        commitlog_offsets: Sequence[int],
        store_ts: int,
    ) -> None:
        """:meth:`build_index` for every record of a bulk append, the keys hashed together."""
        # Offsets rise through the run: only its first records can be below what the
        # files already hold (indexed before a restart).
        done = self._indexed_end()
        if isinstance(keys_of_records, KeyColumn) and not keys_of_records.shared:
            # One key a record, its unique id: hashed from the batch's id column.
            first = bisect.bisect_right(commitlog_offsets, done)
            offsets = list(commitlog_offsets[first:])
            hashes = column_key_hashes(topic, keys_of_records.ids[first:]) if offsets else []
        else:
            flat: list[str] = []
            offsets = []
            for keys, commitlog_offset in zip(keys_of_records, commitlog_offsets, strict=True):
                if commitlog_offset <= done:
                    continue
                for key in keys:
                    if key:
                        flat.append(key)
                        offsets.append(commitlog_offset)
            hashes = key_hashes(topic, flat)
        self._put(hashes, offsets, store_ts)

    def build_index_many(self, entries: Sequence[IndexEntry]) -> None:
        """:meth:`build_index` of several records of any topics, in CommitLog order (the
        one-record sections of an append of many topics), their keys hashed together."""
        done = self._indexed_end()
        topics: list[str] = []
        keys: list[str] = []
        offsets: list[int] = []
        stamps: list[int] = []
        for topic, record_keys, commitlog_offset, store_ts in entries:
            if commitlog_offset <= done:
                continue  # indexed before a restart
            for key in record_keys:
                if key:
                    topics.append(topic)
                    keys.append(key)
                    offsets.append(commitlog_offset)
                    stamps.append(store_ts)
        hashes = topics_key_hashes(topics, keys)
        start = 0
        for end in range(1, len(hashes) + 1):  # a put takes the entries of one store time
            if end == len(hashes) or stamps[end] != stamps[start]:
                self._put(hashes[start:end], offsets[start:end], stamps[start])
                start = end

    def _put(self, hashes: Sequence[int], offsets: Sequence[int], store_ts: int) -> None:
        """Entries into the newest file, then into new ones as each fills."""
        current = self.files[-1] if self.files else None
        while hashes:
            written = current.put_many(hashes, offsets, store_ts) if current is not None else 0
            if written < len(hashes):
                current = self._roll()
            hashes, offsets = hashes[written:], offsets[written:]
        if current is not None:
            self._ahead(current)

    def _ahead(self, newest: IndexFile) -> None:
        """Start making the next file once the newest is half full."""
        if self.spare is not None and 2 * newest.entry_count >= newest.max_entries:
            self.spare.prepare()

    def _indexed_end(self) -> int:
        """The CommitLog offset of the newest entry (-1: none). After a crash the newest
        file may have lost every entry to the cut while older files keep theirs: those
        must not be indexed twice by the re-dispatch."""
        for f in reversed(self.files):
            if f.entry_count:
                return f.end_phy_offset
        return -1

    def _roll(self) -> IndexFile:
        """Start a new file (the previous one, if any, is full).

        It runs in the dispatch, on the store's event loop, so it waits for no disk:
        the file is the one made ahead when it is ready (:attr:`spare`), or is made
        here, without an fsync either way (``durable=False``), and the full one is left
        to the next :meth:`flush`, which syncs the directory before any file. A crash
        before that flush loses a file begun after the checkpoint, which recovery
        drops anyway and re-dispatches (module docstring)."""
        self.index_dir.mkdir(parents=True, exist_ok=True)
        now_ms = time.time_ns() // 1_000_000
        path = self.index_dir / index_file_name(now_ms)
        while path.exists():  # two files in one millisecond
            now_ms += 1
            path = self.index_dir / index_file_name(now_ms)
        if self.spare is not None:  # the file made ahead, when it is ready
            self.spare.take(path.with_name(path.name + ".tmp"))
        created = IndexFile(
            path, self.max_hash_slot_num, self.max_index_num, create=True, durable=False
        )
        if self.random_reads:
            created.mapped.read_randomly()
        with self._lock:
            self.files.append(created)
            self._dir_unsynced = True
        return created

    def flush(self) -> int:
        """Force every changed file to disk, the directory's new names first; returns the
        newest end timestamp flushed."""
        newest = 0
        files = self._held()
        try:
            self._sync_dir()
            for f in files:
                end = f.end_timestamp  # read before the flush: a lower bound
                f.flush()
                newest = max(newest, end)
        finally:
            for f in files:
                f.release()
        return newest

    def _sync_dir(self) -> None:
        """fsync the directory when a file was made since the last time."""
        with self._lock:
            unsynced, self._dir_unsynced = self._dir_unsynced, False
        if unsynced:
            try:
                fsync_dir(self.index_dir)
            except BaseException:
                with self._lock:
                    self._dir_unsynced = True  # the next flush tries again
                raise

    def release_behind(self) -> int:
        """Release the pages behind the index's page-cache window (flushed ones only: call
        after :meth:`flush`); bytes released."""
        if not self.page_cache.enabled:
            return 0
        files = self._held()
        try:
            return self.page_cache.release_behind(files)
        finally:
            for f in files:
                f.release()

    # ---------------------------------------------------------------- reads
    def query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int) -> list[int]:
        """CommitLog offsets of records whose key hash matches, newest first.

        Collisions are possible: the caller compares the real key.
        """
        out: list[int] = []
        if max_count <= 0:
            return out
        h = key_hash(topic, key)
        for f in reversed(self._held()):
            try:
                if len(out) < max_count and f.entry_count and f.overlaps(begin_ms, end_ms):
                    f.lookup(h, max_count, begin_ms, end_ms, out)
            finally:
                f.release()
        return out

    def _held(self) -> list[IndexFile]:
        """A snapshot of the files, each with a reader reference taken."""
        with self._lock:
            return [f for f in self.files if f.hold()]

    def verify_entries(self) -> list[str]:
        """Structural problems of every file (empty when sound)."""
        problems: list[str] = []
        files = self._held()
        try:
            for earlier, later in zip(files, files[1:], strict=False):
                if (
                    earlier.entry_count
                    and later.entry_count
                    and later.begin_phy_offset < earlier.end_phy_offset
                ):
                    problems.append(
                        f"index {later.path.name} begins at offset "
                        f"{later.begin_phy_offset}, before the end of "
                        f"{earlier.path.name}"
                    )
            for f in files:
                problems.extend(f.check())
        finally:
            for f in files:
                f.release()
        return problems

    # ---------------------------------------------------------------- deletion
    def delete_files_below(self, min_offset: int, force_after_s: float = 120.0) -> int:
        """Delete files (never the newest) whose entries all lie below ``min_offset``."""
        with self._lock:
            doomed = [
                f for f in self.files[:-1] if f.entry_count == 0 or f.end_phy_offset < min_offset
            ]
            for f in doomed:
                self.files.remove(f)
        for f in doomed:
            f.destroy(force_after_s)
            log.info("index: deleted %s (entries below offset %d)", f.path.name, min_offset)
        return len(doomed)

    def destroy_all(self) -> None:
        if self.spare is not None:
            self.spare.discard()
        with self._lock:
            doomed, self.files = self.files, []
        for f in doomed:
            f.destroy(0)

    def close(self) -> None:
        if self.spare is not None:
            self.spare.discard()
        with self._lock:
            files, self.files = self.files, []
        for f in files:
            f.flush()
            f.close()
