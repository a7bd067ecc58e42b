"""IndexSpare: the next index file, made in the background before the newest one fills.

An index file is big (420 MB with the default geometry, layout in
:mod:`services.store.index_file`) and the roll to a new one happens in the
dispatch, on the store's event loop. Made there, a file cost the loop its sizing
and allocation, then the first faults on its fresh mapping, each of which reads
around the page it touches (the disk's ``read_ahead_kb``: 8 MiB on this machine),
zero-filling unwritten space: 3-5 ms for the file and 6 ms for its first 50 puts
(bench/history/side-by-side.md, "An index file made ahead").

So once the newest file is half full, :meth:`IndexSpare.prepare` starts a thread
that makes ``index/next.tmp`` as the roll would (sized and allocated, no fsync:
the roll renames it without one) and reads its header, slot table and first
:data:`CACHED_ENTRY_BYTES` of entries once, so those pages sit in the page cache
(``pread`` releases the GIL; ``POSIX_FADV_WILLNEED`` left most of them out). The
roll then :meth:`takes <IndexSpare.take>` it under its ``.tmp`` name, and
:func:`~services.store.mapped_file.create_sized_file` renames it to the new file's
name: the puts after the roll find the slot table cached. A spare
still being made, or whose making failed (a full disk), is not waited for: the roll
makes its file itself, as before, and the spare serves the roll after it. One
attempt a roll, so a full disk is not retried at every put.

The spare is no data: a clean close removes it, and loading removes any ``.tmp`` in
``index/`` (one left by a crash). It reserves one more file's space on the disk from
the moment the newest file is half full.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Final

from services.store.mapped_file import prepare_sized_file

log = logging.getLogger(__name__)

SPARE_NAME: Final = "next.tmp"
CACHED_ENTRY_BYTES: Final = 1 << 20
"""The entries read into the page cache with the slot table: the first 52,428."""
READ_CHUNK: Final = 1 << 20


class IndexSpare:
    """Makes the next index file in a background thread (module docstring)."""

    def __init__(self, index_dir: Path, file_size: int, cached_bytes: int) -> None:
        self.path = index_dir / SPARE_NAME
        self.file_size = file_size
        self.cached_bytes = min(file_size, cached_bytes + CACHED_ENTRY_BYTES)
        """Bytes from the file's start read once into the page cache."""
        self._thread: threading.Thread | None = None
        """The making of the spare the next roll takes (None: not started since the
        last roll took or passed it)."""

    def prepare(self) -> None:
        """Start making the spare, unless it is made or being made (cheap: called on
        puts once the newest file is half full)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._make, name="boltmq-index-spare", daemon=True)
        self._thread.start()

    def _make(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            prepare_sized_file(self.path, self.file_size, sync=False)
            fd = os.open(self.path, os.O_RDONLY)
            try:
                for offset in range(0, self.cached_bytes, READ_CHUNK):
                    os.pread(fd, min(READ_CHUNK, self.cached_bytes - offset), offset)
            finally:
                os.close(fd)
        except OSError as exc:  # the roll makes its file itself and reports what fails
            log.warning("index: the next file could not be made ahead (%s)", exc)

    def take(self, tmp: Path) -> bool:
        """Move a finished spare to ``tmp`` (the new file's ``.tmp`` name) and return
        True; False when there is none ready, without waiting for one being made."""
        thread = self._thread
        if thread is None or thread.is_alive():
            return False
        self._thread = None
        try:
            if self.path.stat().st_size != self.file_size:
                return False
            os.replace(self.path, tmp)
        except FileNotFoundError:  # its making failed: the roll makes the file itself
            return False
        return True

    def wait(self) -> None:
        """Wait until a spare being made is made (or its making failed)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def discard(self) -> None:
        """Wait for a spare being made, then remove it (close, destroy)."""
        self.wait()
        self._thread = None
        self.path.unlink(missing_ok=True)
