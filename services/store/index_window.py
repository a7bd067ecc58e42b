"""IndexPageCacheWindow: the index files keep only their newest flushed entries in memory.

Every message the SDK sends carries a unique key (UNIQ_KEY) and the store indexes
it: 20 bytes of index entry a message, written through the mapping of the newest
index file (layout in :mod:`services.store.index_file`). Left alone those pages
stay mapped and cached, so the store's memory grows with its backlog: 2 GB at
100,000,000 messages. So after each round of the consume-queue flusher (which
flushes the index files whole, :meth:`IndexService.flush`) the index's window
(``index_page_cache_window_bytes``) releases, with the mechanics of the CommitLog's
and the queues' windows (:meth:`MappedFile.drop_cached`: ``MADV_DONTNEED`` then
``POSIX_FADV_DONTNEED``):

- in the newest file, the one still written: its entry pages more than the window
  behind the end of its flushed entries (:attr:`IndexFile.flushed_end`), in ranges
  that end on a :data:`RELEASE_ALIGN_BYTES` boundary of the file, so at most that
  much more than the window stays behind. Its header and slot table stay: a put
  writes a slot anywhere in the table, so the table is written all over and
  releasing it would only fault it straight back in. Entries written since the last
  flush are never released, nor the page holding the end of the flushed ones.
  The kernel drops only cached folios wholly inside a released range: when it
  caches the table's last page and the first entries as one large folio (up to
  2 MiB), those entries stay with the table.
- every older file, full and no longer written: all of it, slot table included,
  once it is flushed (the roll to a new file flushes it).

A lookup (QueryByKey, verify) reads the slot and the chain of entries of its key,
anywhere in any file: released pages fault back in from disk, and every
``SWEEP_INTERVAL_S`` (at the flusher's next round, whether anything was written or
not) everything released is released again, so such reads do not accumulate.
``index_page_cache_window_bytes`` 0 turns the window off.

With the default slot count (5,000,000: a 20 MB table) the newest file's table is
what stays, plus the window: 4 MiB by default, the newest 209,715 entries, which
the lookups of recent keys (a message just sent, traced) find without a disk read.
A store has a single file written at a time, so a larger window than a consume
queue's costs little, and a smaller one saves little next to the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.store.index_file import IndexFile
from services.store.mapped_file import PAGE_SIZE
from services.store.page_cache import (
    RELEASE_ALIGN_BYTES,
    SWEEP_INTERVAL_S,
    SweepClock,
    check_window,
)


class IndexPageCacheWindow:
    """Releases the cached pages of index files behind a window (see the module docstring)."""

    def __init__(
        self,
        window_bytes: int,
        sweep_interval_s: float = SWEEP_INTERVAL_S,
        *,
        align_bytes: int = RELEASE_ALIGN_BYTES,
    ) -> None:
        check_window(window_bytes, align_bytes)
        self.window_bytes = window_bytes
        self.align_bytes = align_bytes
        self.sweep = SweepClock(sweep_interval_s)
        self.released_bytes = 0
        """Bytes released so far (a page released again counts again)."""

    @property
    def enabled(self) -> bool:
        return self.window_bytes > 0

    def release_behind(self, files: Sequence[IndexFile]) -> int:
        """Release what lies behind the window in ``files`` (oldest first, the last one
        the file still written); bytes released."""
        if not self.enabled or not files:
            return 0
        sweep = self.sweep.due()
        released = sum(self._release_whole(f, sweep) for f in files[:-1])
        released += self._release_entries(files[-1], sweep)
        self.released_bytes += released
        return released

    def _release_whole(self, f: IndexFile, sweep: bool) -> int:
        """All of a file no longer written, once all its entries are flushed."""
        size = f.mapped.file_size
        if f.released_to >= size and not sweep:
            return 0
        if f.dirty or f.flushed_end < f.entries_end:
            return 0  # written since its last flush: the next round's
        released = f.mapped.drop_cached(0, size)
        f.released_to = size
        return released

    def _release_entries(self, f: IndexFile, sweep: bool) -> int:
        """The entry pages of the written file more than the window behind its flushed end."""
        first = -(-f.entries_at // PAGE_SIZE) * PAGE_SIZE  # the slot table's pages stay
        target = (f.flushed_end - self.window_bytes) // self.align_bytes * self.align_bytes
        start = first if sweep else max(first, f.released_to)
        if target <= start:
            return 0
        released = f.mapped.drop_cached(start, target)
        f.released_to = max(f.released_to, target)
        return released
