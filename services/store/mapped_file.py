"""MappedFile: one fixed-size file mapped into memory, with its three positions.

``wrote_position >= committed_position >= flushed_position`` (bytes from the
start of the file). A write is committed as soon as it is made (it is in the
page cache, which the mapping shares); ``committed_position`` is kept for the
vocabulary and for HA, which ships committed bytes. Consume queues and index
files write through the mapping (:meth:`MappedFile.write`); the CommitLog
writes its records with pwrite (:meth:`MappedFile.write_at`), which is cheaper
for fresh pages, and reads them through the mapping.

Files are created the durable way: a ``.tmp`` file is sized, fsynced, renamed
to its final name and the directory fsynced, so a crash never leaves a file of
the wrong size under a real name. Consume-queue and index files are the
exception (``durable=False``; ``MappedFileQueue.deferred_create`` and
``IndexService._roll``): made in the dispatch, on the store's event loop, they
are sized and renamed without waiting for the disk and made durable by their
next flush. Flushing uses ``os.fdatasync`` on the file descriptor (it writes back
pages dirtied through the mapping and releases the GIL, where ``mmap.flush``
would hold it for the whole msync).

A file just made empty and written through its mapping from its start (a
consume queue's) is mapped ``fresh_random``: its mapping is advised
``MADV_RANDOM`` until :meth:`MappedFile.settle` (called once it is full), so the
first write's page fault allocates the page it touches instead of reading
ahead the whole fresh file (6 MB of unwritten space: 1.5-1.8 ms a new queue on
the event loop, against tens of microseconds a page; bench/history/side-by-side.md,
"A new queue's first file"). Every page of such a file is written before it is
read, so readahead has nothing to bring in until the file is full. A store's index
files are advised the same way for good (:meth:`MappedFile.read_randomly`): lookups
read them at scattered points, and puts write their slot tables all over.

Readers take a reference (:meth:`hold` / :meth:`release`); :meth:`destroy`
unlinks the file at once (Linux keeps the pages of a deleted file alive while
mapped) and unmaps it only when the last reader has let go, or forcibly after a
grace period.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path

from boltmq.wire.segment_name import FILE_NAME_DIGITS, file_name

PAGE_SIZE = 4096

__all__ = ["FILE_NAME_DIGITS", "PAGE_SIZE", "MappedFile", "file_name", "fsync_dir"]


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or unlink in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_sized_file(path: Path, size: int, *, durable: bool = True) -> None:
    """Create ``path`` of ``size`` zero bytes via tmp -> fsync -> rename -> fsync(dir).

    A ``.tmp`` of the right size left by :func:`prepare_sized_file` (the
    background pre-allocation) is used as it is. Not ``durable``: tmp -> rename,
    nothing fsynced (derived files made on a hot path, whose owner's next flush
    fsyncs the directory before their data; ext4 and xfs journal the sizing
    before the rename, so a crash leaves the name whole or absent).
    """
    tmp = path.with_name(path.name + ".tmp")
    if not (tmp.exists() and tmp.stat().st_size == size):
        prepare_sized_file(tmp, size, sync=durable)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def prepare_sized_file(tmp: Path, size: int, *, sync: bool = True) -> None:
    """Write a sized, allocated, fsynced ``.tmp`` file (step one of creation).

    Without ``sync``: not fsynced (:func:`create_sized_file` not ``durable``)."""
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        # Allocate the blocks now: writes through the mapping then never fault
        # into the file system's block allocator (6x faster appends), and a full
        # disk fails here with ENOSPC instead of SIGBUS on a later page write.
        os.posix_fallocate(fd, 0, size)
        if sync:
            os.fsync(fd)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)


class MappedFile:
    """A fixed-size file of a MappedFileQueue, mapped read-write."""

    def __init__(
        self,
        path: Path,
        file_size: int,
        *,
        create: bool = False,
        durable: bool = True,
        fresh_random: bool = False,
    ) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name)
        if create:
            create_sized_file(path, file_size, durable=durable)
        actual = path.stat().st_size
        if actual != file_size:
            raise ValueError(f"{path} is {actual} bytes, expected {file_size}")
        self._fd = os.open(path, os.O_RDWR)
        self.mm = mmap.mmap(self._fd, file_size, access=mmap.ACCESS_WRITE)
        self.view = memoryview(self.mm)
        self.random_access = fresh_random
        """Advised MADV_RANDOM: made ``fresh_random`` until :meth:`settle` (module
        docstring), or from :meth:`read_randomly` on."""
        if self.random_access:
            self.mm.madvise(mmap.MADV_RANDOM)
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last record written (for cleanup)
        self._refs = 0
        self._lock = threading.Lock()
        self.available = True
        self._destroyed_at = 0.0
        self.closed = False

    # ---------------------------------------------------------------- positions
    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, position: int) -> None:
        """Set all three positions (after recovery or a load)."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    def dirty_pages(self) -> int:
        return (self.committed_position // PAGE_SIZE) - (self.flushed_position // PAGE_SIZE)

    def settle(self) -> None:
        """Give a ``fresh_random`` file back the kernel's normal readahead (it is full:
        from now on it is only read, and readers behind the page-cache window want it)."""
        if self.random_access and self.hold():
            try:
                self.mm.madvise(mmap.MADV_NORMAL)
                self.random_access = False
            finally:
                self.release()

    def read_randomly(self) -> None:
        """Advise ``MADV_RANDOM`` from now on (a file read at scattered points: a store's
        index files), so a fault reads the page it needs, not the disk's read-ahead
        around it."""
        if not self.random_access and self.hold():
            try:
                self.mm.madvise(mmap.MADV_RANDOM)
                self.random_access = True
            finally:
                self.release()

    # ---------------------------------------------------------------- writes
    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` at wrote_position; returns the position written at."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{self.path.name}: write of {len(data)} bytes at {pos} overflows")
        self.mm[pos:end] = data
        self.wrote_position = self.committed_position = end
        return pos

    def write_at(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``position`` through the file (pwrite), not the mapping.

        The mapping sees the bytes at once (one page cache). A write allocates
        the fresh page-cache pages itself, at a third to a half of the cost of
        faulting them in through the mapping (bench/RESULTS.md), and
        releases the GIL while it copies. The file was allocated whole when it
        was created, so a write cannot fail for space.
        """
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, position)
            if written <= 0:
                raise OSError(errno.EIO, f"short write at {position} of {self.path}")
            view = view[written:]
            position += written

    def read_at(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position``, read through the file (pread), not the
        mapping: a lone small read of pages not cached reads those pages, where a fault
        on the mapping reads the disk's read-ahead around them (point reads,
        :mod:`services.store.point_reads`)."""
        return os.pread(self._fd, length, position)

    def flush(self, least_pages: int = 0) -> int:
        """fdatasync when at least ``least_pages`` pages are dirty; returns flushed_position."""
        target = self.committed_position
        if target <= self.flushed_position:
            return self.flushed_position
        dirty = (target // PAGE_SIZE) - (self.flushed_position // PAGE_SIZE)
        if least_pages > 0 and dirty < least_pages:
            return self.flushed_position
        if not self.hold():
            return self.flushed_position
        try:
            os.fdatasync(self._fd)
        finally:
            self.release()
        if target > self.flushed_position:
            self.flushed_position = target
        return self.flushed_position

    def drop_cached(self, start: int, end: int) -> int:
        """Let the kernel drop the cached pages of ``[start, end)``; returns the bytes released.

        Only whole pages before ``flushed_position`` are released (clean pages,
        on disk already); the rest of the range is left as it is. A file flushed
        whole is released to its end, with the last page of a size that is not a
        multiple of pages (consume-queue files). The bytes stay readable: the
        next read faults them back in from the file.
        """
        start -= start % PAGE_SIZE
        end = min(end, self.flushed_position)
        to_file_end = end >= self.file_size
        if not to_file_end:
            end = end // PAGE_SIZE * PAGE_SIZE
        if end <= start or not self.hold():
            return 0
        try:
            self.mm.madvise(mmap.MADV_DONTNEED, start, end - start)
            # Length 0 is "to the end of the file": a partial last page is dropped too.
            length = 0 if to_file_end else end - start
            os.posix_fadvise(self._fd, start, length, os.POSIX_FADV_DONTNEED)
        finally:
            self.release()
        return end - start

    def read_ahead(self, start: int, end: int) -> int:
        """Ask the kernel to start reading ``[start, end)`` into the page cache, without
        waiting (``POSIX_FADV_WILLNEED``); returns the bytes asked for.

        For a reader of pages released behind the CommitLog's page-cache window:
        one request for a whole range instead of a synchronous fault for every
        readahead step the reader's copy would take.
        """
        start -= start % PAGE_SIZE
        end = min(end, self.file_size)
        if end <= start or not self.hold():
            return 0
        try:
            os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_WILLNEED)
        finally:
            self.release()
        return end - start

    def zero_from(self, position: int, end: int | None = None) -> None:
        """Zero bytes [position, end) so stale records can never resurface.

        To the end of the file this shrinks the file to ``position`` and grows it
        back: the kernel drops the cut pages from the mapping and the tail reads
        as zeros without writing (and dirtying) up to a whole segment of zeros.
        Callers make sure no other thread touches the file meanwhile.
        """
        stop = self.file_size if end is None else min(end, self.file_size)
        if stop >= self.file_size and self.file_size - position > 1024 * 1024:
            os.ftruncate(self._fd, position)
            os.ftruncate(self._fd, self.file_size)
            os.posix_fallocate(self._fd, position, self.file_size - position)
            return
        chunk = 8 * 1024 * 1024
        zeros = bytes(min(chunk, max(0, stop - position)))
        pos = position
        while pos < stop:
            n = min(chunk, stop - pos)
            self.mm[pos : pos + n] = zeros[:n]
            pos += n

    # ---------------------------------------------------------------- references
    def hold(self) -> bool:
        """Take a reader reference; False when the file is being destroyed."""
        with self._lock:
            if not self.available:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            if not self.available and self._refs <= 0:
                self._close_locked()

    @property
    def ref_count(self) -> int:
        return self._refs

    def destroy(self, force_after_s: float = 120.0) -> bool:
        """Unlink the file; unmap now if unreferenced, else when readers let go.

        Returns True when the mapping has been closed.
        """
        with self._lock:
            if self.available:
                self.available = False
                self._destroyed_at = time.monotonic()
                try:
                    self.path.unlink()
                except FileNotFoundError:
                    pass
            overdue = time.monotonic() - self._destroyed_at >= force_after_s
            if self._refs <= 0 or overdue:
                self._close_locked()
            return self.closed

    def close(self) -> None:
        """Unmap and close without deleting (shutdown)."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.view.release()
            self.mm.close()
        except BufferError:
            # A reader still holds a memoryview slice of the mapping: leave the
            # mmap to the garbage collector, which unmaps it when the view dies.
            pass
        os.close(self._fd)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position})"
        )
