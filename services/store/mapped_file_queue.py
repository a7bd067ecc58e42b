"""MappedFileQueue: an ordered list of same-size MappedFiles named by start offset.

File ``n`` of the list covers ``[start_n, start_n + file_size)`` where the
names are 20-digit start offsets and consecutive files are contiguous. The
file holding offset ``p`` is ``(p - first_start) // file_size`` in the list.
Shared by the CommitLog (segments) and each ConsumeQueue.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

from services.store.mapped_file import (
    FILE_NAME_DIGITS,
    MappedFile,
    file_name,
    fsync_dir,
    prepare_sized_file,
)

_NAME = re.compile(rf"^\d{{{FILE_NAME_DIGITS}}}$")


class CorruptFileLayout(ValueError):
    """Files of a queue are misnamed, missized or not contiguous."""


class MappedFileQueue:
    """The files of one CommitLog or consume queue, oldest first."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        # Guards the list itself (creation, deletion); readers copy the list.
        self.lock = threading.RLock()
        self.preallocate = False
        """Prepare the next file in the background after each creation (CommitLog)."""
        self.deferred_create = False
        """Create files without waiting for the disk (consume queues): sized and renamed
        with no fsync, mapped ``fresh_random`` (settled when the next is made),
        their directory entries made durable by the next :meth:`flush` before any of
        their data counts as flushed (the checkpoint only trusts flushed data, and
        recovery re-dispatches the rest from the CommitLog). A new queue's first file
        is made in the dispatch, on the store's event loop."""
        self._unsynced_dirs: set[Path] = set()
        """Directories whose new entries (a deferred file, a new directory) await a
        :meth:`flush` (guarded by :attr:`lock`)."""
        self._preallocator: threading.Thread | None = None
        self.torn: list[Path] = []
        """Files :meth:`load` found shorter than ``file_size`` and extended with zeros."""

    # ---------------------------------------------------------------- loading
    def load(self, *, repair_torn: bool = False) -> list[str]:
        """Map every file in the directory; returns warnings about files set aside.

        Stray ``.tmp`` files from an interrupted creation are removed. A file of
        the wrong size or a gap between files is a CorruptFileLayout: BoltMQ
        refuses to guess rather than serve the wrong bytes. With ``repair_torn``
        (a starting store, never the offline reader) a file shorter than the
        configured size is torn, not misconfigured: it is extended with zeros,
        so its lost tail reads as unwritten space for recovery to cut or
        re-dispatch, named in a warning and in :attr:`torn`.
        """
        warnings: list[str] = []
        if not self.directory.exists():
            return warnings
        names = []
        for path in sorted(self.directory.iterdir()):
            if path.name.endswith(".tmp"):
                path.unlink()  # a pre-allocated or half-created file: never data
                continue
            if not _NAME.fullmatch(path.name):
                warnings.append(f"ignored unexpected file {path}")
                continue
            names.append(path)
        expected = None
        for path in names:
            start = int(path.name)
            size = path.stat().st_size
            if repair_torn and size < self.file_size:
                os.truncate(path, self.file_size)
                self.torn.append(path)
                warnings.append(
                    f"{path} was torn ({size} of {self.file_size} bytes): extended with zeros"
                )
                size = self.file_size
            if size != self.file_size:
                raise CorruptFileLayout(
                    f"{path} is {size} bytes but the configured file size is {self.file_size}"
                )
            if start % self.file_size:
                raise CorruptFileLayout(
                    f"{path}: start offset is not a multiple of {self.file_size}"
                )
            if expected is not None and start != expected:
                raise CorruptFileLayout(f"{path}: expected a file starting at {expected}")
            expected = start + self.file_size
            mf = MappedFile(path, self.file_size)
            mf.set_positions(self.file_size)
            self.files.append(mf)
        return warnings

    # ---------------------------------------------------------------- lookup
    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte (wrote position)."""
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        files = self.files
        for mf in reversed(files):
            if mf.flushed_position > 0 or mf is files[0]:
                return mf.file_from_offset + mf.flushed_position
        return 0

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file that holds ``offset``, or None when outside the queue."""
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        index = (offset - first) // self.file_size
        if offset < first or index >= len(files):
            return None
        mf = files[index]
        if mf.file_from_offset <= offset < mf.file_end_offset:
            return mf
        for mf in files:  # list changed under us; fall back to a scan
            if mf.file_from_offset <= offset < mf.file_end_offset:
                return mf
        return None

    def create_file(self, start_offset: int) -> MappedFile:
        """Create and append the file starting at ``start_offset``."""
        with self.lock:
            last = self.last_file()
            if last is not None and start_offset != last.file_end_offset:
                raise CorruptFileLayout(
                    f"new file at {start_offset} does not follow {last.file_end_offset}"
                )
            if self.deferred_create:
                mf = self._create_deferred(self.directory / file_name(start_offset))
            else:
                self.directory.mkdir(parents=True, exist_ok=True)
                if self._preallocator is not None:
                    self._preallocator.join()
                    self._preallocator = None
                path = self.directory / file_name(start_offset)
                mf = MappedFile(path, self.file_size, create=True)
            if last is not None:
                last.settle()
            self.files = [*self.files, mf]
            if self.preallocate:
                self._start_preallocation(mf.file_end_offset)
            return mf

    def _create_deferred(self, path: Path) -> MappedFile:
        """``path`` sized and allocated as a ``.tmp`` and renamed, nothing fsynced
        (:attr:`deferred_create`); under :attr:`lock`. The file systems this runs on
        (ext4, xfs) journal the sizing before the rename, so a crash leaves the name
        whole or absent (absent: recovery re-dispatches the entries, which no
        checkpoint covers yet; short, on another file system: rebuilt from the first
        segment). A file made before it whose name is not durable yet is made so
        first, so a crash never leaves a later file without the one before it."""
        if self._unsynced_dirs:
            self._sync_dirs()
        made = _make_dirs(self.directory)
        mf = MappedFile(path, self.file_size, create=True, durable=False, fresh_random=True)
        self._unsynced_dirs.update([self.directory, *(d.parent for d in made)])
        return mf

    def _sync_dirs(self) -> None:
        """fsync every directory with entries not durable yet, deepest first; under
        :attr:`lock`. One removed since (its queue deleted) has nothing to keep."""
        for directory in sorted(self._unsynced_dirs, key=lambda d: len(d.parts), reverse=True):
            try:
                fsync_dir(directory)
            except FileNotFoundError:
                pass
        self._unsynced_dirs.clear()

    def _start_preallocation(self, start_offset: int) -> None:
        tmp = self.directory / (file_name(start_offset) + ".tmp")

        def prepare() -> None:
            try:
                prepare_sized_file(tmp, self.file_size)
            except OSError:
                pass  # the foreground creation retries and reports the error

        self._preallocator = threading.Thread(
            target=prepare, name="boltmq-preallocate", daemon=True
        )
        self._preallocator.start()

    def last_file_or_create(self, start_offset: int = 0) -> MappedFile:
        """The writable last file, creating the next one when it is full."""
        last = self.last_file()
        if last is None:
            return self.create_file(start_offset - start_offset % self.file_size)
        if last.is_full():
            return self.create_file(last.file_end_offset)
        return last

    # ---------------------------------------------------------------- flush
    def flush(self, least_pages: int = 0) -> int:
        """Flush dirty files oldest first; returns the flushed offset.

        The names of files made since the last flush (:attr:`deferred_create`) are made
        durable first: the files flushed are those listed before that."""
        files = self.files
        if self._unsynced_dirs:
            with self.lock:
                self._sync_dirs()
        for mf in files:
            if mf.committed_position > mf.flushed_position:
                mf.flush(least_pages if mf is files[-1] else 0)
        return self.flushed_offset

    def dirty_pages(self) -> int:
        return sum(mf.dirty_pages() for mf in self.files)

    # ---------------------------------------------------------------- truncation
    def truncate_to(self, offset: int) -> int:
        """Cut everything at and after ``offset``: zero the tail, delete later files.

        Returns how many bytes of written data were cut.
        """
        cut = 0
        with self.lock:
            keep: list[MappedFile] = []
            for mf in self.files:
                if mf.file_end_offset <= offset:
                    keep.append(mf)
                elif mf.file_from_offset <= offset:
                    position = offset - mf.file_from_offset
                    cut += max(0, mf.wrote_position - position)
                    mf.zero_from(position)
                    mf.set_positions(position)
                    mf.flush()
                    keep.append(mf)
                else:
                    cut += mf.wrote_position
                    mf.destroy(force_after_s=0)
            self.files = keep
            if self.directory.exists():
                fsync_dir(self.directory)
        return cut

    def delete_files(
        self,
        predicate: Callable[[MappedFile], bool],
        limit: int,
        force_after_s: float,
        keep_last: bool = True,
    ) -> list[MappedFile]:
        """Destroy up to ``limit`` files from the front while ``predicate`` holds."""
        removed: list[MappedFile] = []
        with self.lock:
            candidates = self.files[:-1] if keep_last else list(self.files)
            for mf in candidates:
                if len(removed) >= limit or not predicate(mf):
                    break
                mf.destroy(force_after_s)
                removed.append(mf)
            if removed:
                self.files = self.files[len(removed) :]
        return removed

    def close(self) -> None:
        with self.lock:
            if self._preallocator is not None:
                self._preallocator.join()
                self._preallocator = None
            for mf in self.files:
                mf.close()


def _make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and the parents it lacks; returns those created, outermost first."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    made = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue  # made beside us meanwhile: its creator makes it durable
        made.append(path)
    return made
