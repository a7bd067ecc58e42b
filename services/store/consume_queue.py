"""ConsumeQueue: the per (topic, queue) index of CommitLog positions.

Entries are 20 bytes, big-endian, entry ``k`` at byte ``k * 20``:

Offset | Size | Field
-------+------+-----------------------------------------------------------------
0      | 8    | commitlog_offset (physical offset of the record)
8      | 4    | size (total_size of the record)
12     | 8    | tags_code: Java String.hashCode() of TAGS as int64 (0 without tags;
       |      | the delivery timestamp for delayed messages)

Files live in ``consumequeue/<topic>/<queueId>/`` and are named by their start
byte offset (20 digits); a file holds ``ceil(size / 20) * 20`` bytes. An entry
whose commitlog_offset is negative or whose size is 0 is unwritten space.

Each queue keeps only its newest flushed bytes mapped: :meth:`ConsumeQueueTable.release_behind`
(after each consume-queue flush round) releases the pages more than
``consume_queue_page_cache_window_bytes`` behind each queue's flushed end, and sweeps
them again now and then (:class:`services.store.page_cache.PageCacheWindow`); a read of
released entries faults them back in from the file.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from boltmq.wire.topic import InvalidTopic, validate_topic
from services.store.config import StoreConfig
from services.store.mapped_file_queue import MappedFileQueue
from services.store.page_cache import CONSUME_QUEUE_RELEASE_ALIGN_BYTES, PageCacheWindow

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE: Final = 20
assert ENTRY.size == ENTRY_SIZE
ENTRY_COMMITLOG_OFFSET_OFFSET: Final = 0
ENTRY_SIZE_OFFSET: Final = 8
ENTRY_TAGS_CODE_OFFSET: Final = 12
ENTRY_DTYPE: Final = np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
"""``ENTRY`` as a numpy record (a run of entries written at once)."""
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE


def _is_written(view: memoryview, index: int) -> bool:
    physical, size, _ = ENTRY.unpack_from(view, index * ENTRY_SIZE)
    return physical >= 0 and size > 0


def _written_entries(view: memoryview, capacity: int) -> int:
    """How many entries a file holds: entries are written as a prefix, so bisect."""
    low, high = 0, capacity
    while low < high:
        mid = (low + high) // 2
        if _is_written(view, mid):
            low = mid + 1
        else:
            high = mid
    return low


class ConsumeQueue:
    """The consume queue of one (topic, queue_id)."""

    def __init__(
        self, root: Path, topic: str, queue_id: int, file_size: int, window_bytes: int = 0
    ) -> None:
        assert file_size % ENTRY_SIZE == 0
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.files = MappedFileQueue(root / topic / str(queue_id), file_size)
        self.files.deferred_create = True  # made in the dispatch, on the event loop
        # Sweeps spread over the interval by a hash of the queue's name.
        phase = zlib.crc32(f"{topic}/{queue_id}".encode()) % 1024 / 1024
        self.page_cache = PageCacheWindow(
            self.files,
            window_bytes,
            align_bytes=CONSUME_QUEUE_RELEASE_ALIGN_BYTES,
            sweep_phase=phase,
        )
        """Releases the pages behind the newest ``window_bytes`` flushed (0: off)."""
        # Smallest valid queue offset (entries below were cleaned with their segments).
        self.min_logic_offset = 0
        # Physical end (offset + size) of the last entry written: how far this
        # queue has been dispatched.
        self.max_physical_offset = -1
        self.last_store_timestamp = 0

    # ---------------------------------------------------------------- load / recover
    def load(self, *, repair_torn: bool = False) -> list[str]:
        return self.files.load(repair_torn=repair_torn)

    def recover(self) -> None:
        """Find the last written entry (in the last 3 files) and cut what follows."""
        end_offset = self.scan_positions()
        if end_offset is not None:
            self.files.truncate_to(end_offset)
        self.min_logic_offset = self.files.min_offset // ENTRY_SIZE

    def scan_positions(self) -> int | None:
        """Set write positions from the data (no change on disk); the end byte offset."""
        files = self.files.files
        if not files:
            return None
        start = max(0, len(files) - 3)
        end_offset = files[start].file_from_offset
        for mf in files[start:]:
            count = _written_entries(mf.view, mf.file_size // ENTRY_SIZE)
            if count:
                physical, size, _ = ENTRY.unpack_from(mf.view, (count - 1) * ENTRY_SIZE)
                self.max_physical_offset = physical + size
            mf.set_positions(count * ENTRY_SIZE)
            end_offset = mf.file_from_offset + count * ENTRY_SIZE
            if count * ENTRY_SIZE < mf.file_size:
                break
        return end_offset

    def truncate_past(self, commitlog_max_offset: int) -> int:
        """Drop entries pointing at or past ``commitlog_max_offset``; returns entries cut."""
        # Entries are ordered by commitlog offset: bisect for the first one to drop.
        low, high = self.min_offset(), self.max_offset()
        while low < high:
            mid = (low + high) // 2
            entry = self.entry(mid)
            if entry is not None and entry[0] + entry[1] <= commitlog_max_offset:
                low = mid + 1
            else:
                high = mid
        cut_at = low
        cut = self.max_offset() - cut_at
        if cut:
            self.files.truncate_to(cut_at * ENTRY_SIZE)
            last = self.entry(cut_at - 1) if cut_at > self.min_offset() else None
            self.max_physical_offset = last[0] + last[1] if last else -1
        return cut

    def truncate_to_queue_offset(self, queue_offset: int) -> None:
        """Keep entries below ``queue_offset`` only (used before re-dispatching)."""
        if queue_offset < self.max_offset():
            self.files.truncate_to(queue_offset * ENTRY_SIZE)
            last = self.entry(queue_offset - 1) if queue_offset > self.min_offset() else None
            self.max_physical_offset = last[0] + last[1] if last else -1

    # ---------------------------------------------------------------- write
    def put(
        self,
        queue_offset: int,
        commitlog_offset: int,
        size: int,
        tags_code: int,
        store_timestamp: int,
    ) -> None:
        """Write the entry for ``queue_offset`` (the dispatcher's only write)."""
        position = queue_offset * ENTRY_SIZE
        files = self.files
        mf = files.last_file()
        if mf is None or position >= mf.file_end_offset:
            if mf is None and position > 0:
                # A queue whose early files were cleaned, or a replica starting
                # mid-stream: the first file starts at the entry's own file, and
                # the entries before this one in it never existed here.
                self.min_logic_offset = queue_offset
            mf = files.last_file_or_create(position)
        relative = position - mf.file_from_offset
        if relative < 0:
            raise ValueError(
                f"{self.topic}/{self.queue_id}: entry {queue_offset} is below the "
                f"last file (already dispatched)"
            )
        if relative > mf.wrote_position:
            # A gap (entries lost with a truncated file): leave it as unwritten
            # space; readers see OFFSET_FOUND_NULL for it.
            pass
        ENTRY.pack_into(mf.mm, relative, commitlog_offset, size, tags_code)
        end = relative + ENTRY_SIZE
        if end > mf.wrote_position:
            mf.wrote_position = mf.committed_position = end
        self.max_physical_offset = commitlog_offset + size
        self.last_store_timestamp = store_timestamp

    def put_run(
        self,
        first_queue_offset: int,
        commitlog_offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        tags_codes: list[int],
        store_timestamp: int,
    ) -> None:
        """Write the entries of consecutive queue offsets from ``first_queue_offset`` (one
        append's records, back to back): the same as :meth:`put` for each, with one copy
        per file."""
        count = len(commitlog_offsets)
        if not count:
            return
        entries = np.empty(count, dtype=ENTRY_DTYPE)
        entries["commitlog_offset"] = commitlog_offsets
        entries["size"] = sizes
        entries["tags_code"] = tags_codes
        data = entries.tobytes()
        position = first_queue_offset * ENTRY_SIZE
        done = 0
        files = self.files
        while done < len(data):
            mf = files.last_file()
            if mf is None or position >= mf.file_end_offset:
                if mf is None and position > 0:
                    self.min_logic_offset = position // ENTRY_SIZE  # as in put()
                mf = files.last_file_or_create(position)
            relative = position - mf.file_from_offset
            if relative < 0:
                raise ValueError(
                    f"{self.topic}/{self.queue_id}: entry "
                    f"{position // ENTRY_SIZE} is below the last file "
                    f"(already dispatched)"
                )
            piece = data[done : done + mf.file_size - relative]
            end = relative + len(piece)
            mf.mm[relative:end] = piece
            if end > mf.wrote_position:
                mf.wrote_position = mf.committed_position = end
            position += len(piece)
            done += len(piece)
        self.max_physical_offset = int(commitlog_offsets[-1]) + int(sizes[-1])
        self.last_store_timestamp = store_timestamp

    def flush(self, least_pages: int = 0) -> int:
        return self.files.flush(least_pages)

    # ---------------------------------------------------------------- read
    def min_offset(self) -> int:
        return max(self.min_logic_offset, self.files.min_offset // ENTRY_SIZE)

    def max_offset(self) -> int:
        """One past the last entry: the queue offset the next message gets."""
        return self.files.max_offset // ENTRY_SIZE

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``(commitlog_offset, size, tags_code)`` or None outside the queue."""
        position = queue_offset * ENTRY_SIZE
        mf = self.files.find(position)
        if mf is None or position - mf.file_from_offset + ENTRY_SIZE > mf.wrote_position:
            return None
        if not mf.hold():
            return None  # the file is being deleted by the cleaner
        try:
            return ENTRY.unpack_from(mf.view, position - mf.file_from_offset)
        finally:
            mf.release()

    def entries(self, queue_offset: int, max_entries: int) -> Iterator[tuple[int, int, int]]:
        """Consecutive entries from ``queue_offset``, within one file per call site loop."""
        for run in self._entry_runs(queue_offset, max_entries):
            yield from ENTRY.iter_unpack(run)

    def entry_columns(
        self, queue_offset: int, max_entries: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:meth:`entries`' commitlog offsets and sizes as two arrays (a pull's bulk read)."""
        offsets, sizes = [], []
        for run in self._entry_runs(queue_offset, max_entries):
            entries = np.frombuffer(run, dtype=ENTRY_DTYPE)
            offsets.append(entries["commitlog_offset"].astype(np.int64))
            sizes.append(entries["size"].astype(np.int64))
        if len(offsets) == 1:
            return offsets[0], sizes[0]
        empty = np.zeros(0, dtype=np.int64)
        return (
            np.concatenate(offsets) if offsets else empty,
            np.concatenate(sizes) if sizes else empty,
        )

    def _entry_runs(self, queue_offset: int, max_entries: int) -> Iterator[bytes]:
        """The bytes of up to ``max_entries`` entries from ``queue_offset``, one copy per
        file (no view of a file outlives its hold)."""
        position = queue_offset * ENTRY_SIZE
        remaining = max_entries
        while remaining > 0:
            mf = self.files.find(position)
            if mf is None or not mf.hold():
                return
            try:
                relative = position - mf.file_from_offset
                stop = min(mf.wrote_position, relative + remaining * ENTRY_SIZE)
                if stop <= relative:
                    return
                count = (stop - relative) // ENTRY_SIZE
                run = bytes(mf.view[relative : relative + count * ENTRY_SIZE])
            finally:
                mf.release()
            yield run
            remaining -= count
            position += count * ENTRY_SIZE
            if stop < mf.file_size:
                return

    def offset_by_time(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int | None]
    ) -> int:
        """The first queue offset whose record was stored at or after ``timestamp_ms``.

        Binary search over entries by the store timestamp of the record each
        points to (``store_time_of(commitlog_offset, size)``; None when that
        record is gone). Before the first entry -> min offset; after the last ->
        max offset.
        """
        low, high = self.min_offset(), self.max_offset() - 1
        # Skip entries whose records were cleaned away.
        while low <= high:
            entry = self.entry(low)
            if entry is not None and store_time_of(entry[0], entry[1]) is not None:
                break
            low += 1
        result = high + 1
        while low <= high:
            mid = (low + high) // 2
            entry = self.entry(mid)
            ts = store_time_of(entry[0], entry[1]) if entry else None
            if ts is None:
                low = mid + 1
                continue
            if ts >= timestamp_ms:
                result = mid
                high = mid - 1
            else:
                low = mid + 1
        return result

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Raise min_logic_offset past entries whose records were deleted."""
        offset = self.min_offset()
        end = self.max_offset()
        while offset < end:
            entry = self.entry(offset)
            if entry is not None and entry[0] >= commitlog_min_offset:
                break
            offset += 1
        self.min_logic_offset = offset

    def delete_files_below(self, commitlog_min_offset: int, force_after_s: float) -> int:
        """Destroy files whose every entry points below the CommitLog minimum."""

        def expired(mf) -> bool:
            last = ENTRY.unpack_from(mf.view, mf.file_size - ENTRY_SIZE)
            return mf.wrote_position >= mf.file_size and 0 <= last[0] < commitlog_min_offset

        removed = self.files.delete_files(expired, limit=1 << 30, force_after_s=force_after_s)
        if removed:
            self.correct_min_offset(commitlog_min_offset)
        return len(removed)

    def destroy(self) -> None:
        """Delete every file (rebuild from the CommitLog)."""
        self.files.truncate_to(0)
        self.min_logic_offset = 0
        self.max_physical_offset = -1

    def close(self) -> None:
        self.files.close()


class ConsumeQueueTable:
    """Every consume queue of a store, created on first use."""

    def __init__(self, root: Path, file_size: int, window_bytes: int = 0) -> None:
        self.root = root
        self.file_size = file_size
        self.window_bytes = window_bytes
        """Each queue's page-cache window (0: off)."""
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self._written: dict[tuple[str, int], None] = {}
        """Queues written since the flusher's last round took them (:meth:`written`)."""
        self._turn = 0
        """Where the next share of the queues starts (:meth:`release_behind`)."""
        self.skipped_torn: list[str] = []
        """Queues :meth:`load` left out for a torn file (``skip_torn``), with why."""

    @classmethod
    def of_store(cls, config: StoreConfig) -> ConsumeQueueTable:
        """The table of a store's ``consumequeue/`` directory, with its settings."""
        return cls(
            config.root_dir / "consumequeue",
            config.consume_queue_file_size,
            config.consume_queue_page_cache_window_bytes,
        )

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self.queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(self.root, topic, queue_id, self.file_size, self.window_bytes)
                    self.queues = {**self.queues, (topic, queue_id): cq}
        return cq

    def load(self, *, repair_torn: bool = False, skip_torn: bool = False) -> list[str]:
        """Map every queue directory; names that are not valid topics are set aside.

        ``repair_torn``: see :meth:`MappedFileQueue.load`; :attr:`torn` then
        tells whether entries were lost with a torn file. ``skip_torn`` (a reader
        that changes nothing): a queue with a file shorter than ``file_size`` (a
        crash before the queue's flush made it durable) is not loaded, and
        :attr:`skipped_torn` names it.
        """
        notes: list[str] = []
        if not self.root.exists():
            return notes
        for topic_dir in sorted(self.root.iterdir()):
            try:
                validate_topic(topic_dir.name)
            except InvalidTopic:
                notes.append(f"ignored {topic_dir}: not a valid topic name")
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    notes.append(f"ignored {queue_dir}: not a queue id")
                    continue
                if skip_torn and (short := self._short_file(queue_dir)) is not None:
                    self.skipped_torn.append(
                        f"{short} is {short.stat().st_size} of {self.file_size} bytes (torn: "
                        f"a store's start extends it and re-dispatches its entries): "
                        f"queue not read"
                    )
                    continue
                cq = self.get_or_create(topic_dir.name, int(queue_dir.name))
                notes.extend(cq.load(repair_torn=repair_torn))
        return notes

    def _short_file(self, queue_dir: Path) -> Path | None:
        """The first file of ``queue_dir`` shorter than ``file_size``, if any."""
        for path in sorted(queue_dir.iterdir()):
            if path.name.isdigit() and path.stat().st_size < self.file_size:
                return path
        return None

    @property
    def torn(self) -> bool:
        """Whether any queue file was found torn (and extended) by :meth:`load`."""
        return any(cq.files.torn for cq in self.queues.values())

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self.queues.values()))

    def topics(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for topic, queue_id in self.queues:
            result.setdefault(topic, []).append(queue_id)
        return {t: sorted(q) for t, q in sorted(result.items())}

    def written(self, keys: Iterable[tuple[str, int]]) -> None:
        """Note queues the dispatcher wrote: the flusher's next round flushes them."""
        with self._lock:
            self._written.update(dict.fromkeys(keys))

    def flush(self, least_pages: int) -> list[ConsumeQueue]:
        """Flush queues; returns the ones flushed (a round releases pages from them).

        ``least_pages`` 0 (a thorough round, the only kind the checkpoint's timestamp
        trusts) flushes every queue. Otherwise only the queues written since the last
        round, so a store of many quiet queues walks none of them between thorough
        rounds (4,096 queues cost the store ~20 ms of CPU a second walked each round).
        One of them left with fewer dirty pages than ``least_pages`` waits, as it did
        when every queue was walked, for its next write or the next thorough round.
        """
        with self._lock:
            written, self._written = self._written, {}
        queues = self.queues
        if least_pages == 0:
            chosen = list(queues.values())
        else:
            chosen = [queues[key] for key in written if key in queues]
        for cq in chosen:
            cq.flush(least_pages)
        return chosen

    def release_behind(self, flushed: Sequence[ConsumeQueue] | None = None, share: int = 1) -> int:
        """Release queues' pages behind their windows (flushed ones only); bytes released.

        Without ``flushed``, every queue. The flusher gives the queues its round flushed
        (their flushed ends moved) and ``share``: the round also takes the next
        1/``share`` of all queues in turn, so each is looked at every ``share`` rounds
        for its periodic sweep, which comes at its own round (``sweep_phase``). A queue
        that has not moved a release step and whose sweep is not due costs no system call.
        """
        if self.window_bytes <= 0:
            return 0
        everyone = list(self.queues.values())
        if flushed is None or not everyone:
            chosen = everyone
        else:
            size = -(-len(everyone) // max(1, share))
            start = self._turn % len(everyone)
            turn = everyone[start : start + size] + everyone[: max(0, start + size - len(everyone))]
            self._turn = start + size
            chosen = [*flushed, *turn]
        return sum(cq.page_cache.release_behind(cq.files.flushed_offset) for cq in chosen)

    def close(self) -> None:
        for cq in self:
            cq.close()
