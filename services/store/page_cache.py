"""PageCacheWindow: a file queue keeps only its newest flushed bytes in the page cache.

Left alone, every byte the store ever wrote stays cached until the kernel
needs the memory. That has two costs a message store feels:

- Under Kubernetes the page cache of a pod is charged to its memory cgroup, so
  a store that writes steadily sits at its memory limit and is reclaimed or
  throttled there, not where its operator sized it.
- On a virtual machine a page the guest has not used lately must be backed by
  the host on first touch. Measured on the 2-core VM of bench/RESULTS.md:
  ``pwrite`` into new cache costs 0.2 ms per MiB while the kernel hands out
  pages it freed recently, and 2.3-3.3 ms per MiB once about
  1.2 GiB of new cache has been taken, ten times more. At 100 MB/s that is a
  quarter of a core per store.

So after each round of the CommitLog flusher the pages more than ``window_bytes`` behind the
flushed offset are released, in ranges that end on a 2 MiB boundary of their
segment (:data:`RELEASE_ALIGN_BYTES`): ``MADV_DONTNEED`` unmaps them from the store's
mapping and ``POSIX_FADV_DONTNEED`` drops them from the cache; new writes then
reuse those pages. Only flushed (clean) pages are released, never the page
that holds the flushed offset itself, so nothing unwritten is ever dropped. A
reader of older records (a consumer far behind, a replica catching up) faults
them back in from disk, as after any eviction; every ``sweep_interval_s``
(at the flusher's next round, whether anything was written or not) the whole
released range is released again so such reads do not accumulate.
``window_bytes`` 0 turns the window off.

Each consume queue has a window of its own
(``consume_queue_page_cache_window_bytes``, released by the consume-queue
flusher after each of its rounds): a queue's entries are 20 bytes a message,
so without it a large backlog keeps 20 B a message mapped in the store
(2 GiB at 100,000,000 messages) and a reader of old entries maps them again.
A store may hold a thousand queues, so their windows release in smaller steps
(:data:`CONSUME_QUEUE_RELEASE_ALIGN_BYTES`: at most that much more than the window
stays mapped behind a queue's flushed end) and sweep at different rounds (each
window's ``sweep_phase``), not all in the same one. A round looks at the queues it
flushed and at a share of the others in turn, each twice a sweep interval, so a
queue's sweep comes at most half an interval late. A step that ends inside a
larger folio unmaps its pages at once; the kernel drops the folio itself from the
cache at the next sweep, which covers it whole.

Such a reader would fault the released pages back in as its copy reaches
them, each fault waiting for a disk read inside the store's serving thread: a
consumer reading 1 KiB messages behind the window cost the store 2.2-3.2 us a
message instead of 1.4 (bench/RESULTS.md). So a read that starts
behind the window (a pull's raw read, or the decoded path at each segment it
enters) first asks the kernel for its first READ_AHEAD_BYTES and as many past
them (``POSIX_FADV_WILLNEED``, which does not wait):
:meth:`PageCacheWindow.read_ahead`. The sweep drops what was read ahead too.

The index files have a window too (``index_page_cache_window_bytes``,
:mod:`services.store.index_window`): they are not a MappedFileQueue, so it has its
own class, sharing :class:`SweepClock` and :meth:`MappedFile.drop_cached` with this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.store.mapped_file import PAGE_SIZE, MappedFile
from services.store.mapped_file_queue import MappedFileQueue

RELEASE_ALIGN_BYTES = 2 * 1024 * 1024
"""Releases end on this boundary within a segment (or at its end). The page cache holds
files in folios of up to 2 MiB (a PMD on x86-64), aligned to their size, and a folio is
dropped only when the range covers all of it: a range ending mid-folio would leave that
folio cached, and the next round, starting mid-folio too, would leave it again."""
READ_AHEAD_BYTES = 16 * 1024 * 1024
"""One step of :meth:`PageCacheWindow.read_ahead`: it asks for at most this much of a read
of released pages and this much past it."""
CONSUME_QUEUE_RELEASE_ALIGN_BYTES = 256 * 1024
"""The release step of a consume queue's window (see the module docstring)."""
SWEEP_INTERVAL_S = 10.0
"""How often the whole released range is released again (pages brought back by readers)."""


class SweepClock:
    """When a window's next sweep is due: every ``interval_s``, the first one ``phase``
    (0 to 1) of an interval early, so that many windows sweep at different rounds."""

    def __init__(self, interval_s: float = SWEEP_INTERVAL_S, phase: float = 0.0) -> None:
        if not 0.0 <= phase < 1.0:
            raise ValueError(f"sweep_phase must be in [0, 1), got {phase}")
        self.interval_s = interval_s
        self._last = time.monotonic() - phase * interval_s

    def due(self) -> bool:
        """True once an interval has passed since the last sweep (which this starts)."""
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return True


def check_window(window_bytes: int, align_bytes: int) -> None:
    """ValueError unless ``window_bytes`` >= 0 and ``align_bytes`` a positive page multiple."""
    if window_bytes < 0:
        raise ValueError(f"window_bytes must not be negative, got {window_bytes}")
    if align_bytes <= 0 or align_bytes % PAGE_SIZE:
        raise ValueError(f"align_bytes must be a positive multiple of {PAGE_SIZE}")


class PageCacheWindow:
    """Releases the cached pages of a MappedFileQueue that lie behind a window.

    ``align_bytes``: releases end on this boundary of their file (a multiple of the
    page size). ``sweep_phase`` (0 to 1): the first sweep comes that fraction of an
    interval early, so that many windows sweep at different rounds.
    """

    def __init__(
        self,
        files: MappedFileQueue,
        window_bytes: int,
        sweep_interval_s: float = SWEEP_INTERVAL_S,
        *,
        align_bytes: int = RELEASE_ALIGN_BYTES,
        sweep_phase: float = 0.0,
    ) -> None:
        check_window(window_bytes, align_bytes)
        self.files = files
        self.window_bytes = window_bytes
        self.align_bytes = align_bytes
        self.released_to = 0
        """Everything before this offset has been released at least once."""
        self.sweep = SweepClock(sweep_interval_s, sweep_phase)
        self._ahead = (0, 0)
        """The range the last read ahead asked for (nothing yet)."""

    @property
    def enabled(self) -> bool:
        return self.window_bytes > 0

    @property
    def sweep_interval_s(self) -> float:
        return self.sweep.interval_s

    @sweep_interval_s.setter
    def sweep_interval_s(self, value: float) -> None:
        self.sweep.interval_s = value

    def release_behind(self, flushed_offset: int) -> int:
        """Release the pages more than the window behind ``flushed_offset``; bytes released."""
        if not self.enabled:
            return 0
        target = self._aligned(flushed_offset - self.window_bytes)
        start = self.released_to
        if self.sweep.due():
            start = 0
            self._ahead = (0, 0)  # what was read ahead goes too
        if target <= start:
            return 0
        released = self._each_segment(start, target, MappedFile.drop_cached)
        self.released_to = max(self.released_to, target)
        return released

    def release_between(self, start: int, offset: int) -> int:
        """Release ``[start, offset - window)`` whatever was released before (a reader that
        went over released pages again: recovery's re-dispatch); bytes released."""
        if not self.enabled:
            return 0
        target = self._aligned(offset - self.window_bytes)
        return self._each_segment(start, target, MappedFile.drop_cached) if target > start else 0

    def read_ahead(self, offset: int, end: int) -> int:
        """A reader is about to read ``[offset, end)``: when that lies behind the window,
        ask the kernel for its first READ_AHEAD_BYTES and READ_AHEAD_BYTES past those, all
        at once; returns the bytes asked for.

        At most two steps from ``offset``: the records of one queue may lie far apart
        (its topic one of many), and the bytes between them are other queues'. Nothing
        is asked when the read starts inside the window (its pages are cached) or when
        the last read ahead covers what this one would ask for but half a step (one
        consumer's next pulls); a read that goes on from the last read ahead asks only
        for what follows it.
        """
        released_to = self.released_to
        if not self.enabled or offset >= released_to:
            return 0
        wanted = min(end, offset + READ_AHEAD_BYTES) + READ_AHEAD_BYTES
        ahead_from, ahead_to = self._ahead
        if ahead_from <= offset < ahead_to:
            if wanted - READ_AHEAD_BYTES // 2 <= ahead_to:
                return 0
            start = ahead_to  # the step after the last one
        else:
            start = ahead_from = offset
        stop = min(wanted, released_to)
        asked = self._each_segment(start, stop, MappedFile.read_ahead)
        self._ahead = (ahead_from, max(stop, start))
        return asked

    def _each_segment(
        self, start: int, stop: int, action: Callable[[MappedFile, int, int], int]
    ) -> int:
        """``action(segment, begin, end)`` on the part of ``[start, stop)`` in each segment
        (positions within it); the sum of what it returns."""
        total = 0
        for mf in self.files.files:
            low = max(start, mf.file_from_offset)
            high = min(stop, mf.file_end_offset)
            if low < high:
                total += action(mf, low - mf.file_from_offset, high - mf.file_from_offset)
        return total

    def _aligned(self, offset: int) -> int:
        """``offset`` moved back to a release boundary of its segment."""
        if offset <= 0:
            return 0
        mf = self.files.find(offset)
        if mf is None:
            return offset // PAGE_SIZE * PAGE_SIZE
        local = offset - mf.file_from_offset
        return mf.file_from_offset + local // self.align_bytes * self.align_bytes
