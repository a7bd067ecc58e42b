"""Flushers: the threads that force dirty pages to disk.

- :class:`CommitLogFlusher` in ASYNC_FLUSH mode forces the CommitLog every
  ``flush_interval_commitlog_ms`` when ``flush_commitlog_least_pages`` pages are
  dirty, and fully every ``flush_commitlog_thorough_interval_ms``.
- In SYNC_FLUSH mode it is a group commit: appenders call :meth:`wait_flushed`
  with their end offset; the thread fsyncs everything written so far, runs
  ``on_flushed`` (the store dispatches what became durable, so an acknowledged
  append is already in its consume queue: read-your-writes) and wakes every
  appender whose end is now durable, so one fsync serves many appends.
- After each round the CommitLog's page-cache window releases what fell behind it
  (:mod:`services.store.page_cache`).
- :class:`ConsumeQueueFlusher` forces consume queues and the index every
  ``flush_interval_consume_queue_ms`` and then writes the checkpoint: the queues the
  dispatcher wrote since the last round, and every queue each
  ``flush_consume_queue_thorough_interval_ms`` (the rounds whose dispatch timestamp
  the checkpoint keeps). After each round the page-cache windows of the queues it
  flushed, and of a share of the others in turn (each twice a sweep interval),
  release what fell behind them, and so does the index's
  (:mod:`services.store.index_window`).

All fsyncs run on these threads (``os.fdatasync`` releases the GIL), never on
an event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from services.store.checkpoint import Checkpoint
from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueue, ConsumeQueueTable
from services.store.index_service import IndexService
from services.store.offset_gate import OffsetGate
from services.store.page_cache import SWEEP_INTERVAL_S

log = logging.getLogger(__name__)


class CommitLogFlusher:
    """Async flush or group commit for the CommitLog."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        on_flushed: Callable[[], object] | None = None,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.on_flushed = on_flushed
        self.on_flush_seconds: Callable[[float], None] | None = None
        """Called with the duration of every flush that made more bytes durable (metrics)."""
        self.fsync_count = 0
        self._request = threading.Event()
        self.gate = OffsetGate(commitlog.max_offset, on_wait=self._request.set)
        """Group commit: appenders wait here until the flushed offset passes their end."""
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._last_thorough = time.monotonic()

    @property
    def flushed_offset(self) -> int:
        """Offset up to which the CommitLog is durable (as of the last flush round)."""
        return self.gate.offset

    # ---------------------------------------------------------------- group commit
    def wait_flushed(self, end_offset: int, timeout_s: float) -> bool:
        """Block until ``end_offset`` is durable; False on timeout (FLUSH_DISK_TIMEOUT)."""
        return self.gate.wait(end_offset, timeout_s)

    async def wait_flushed_async(self, end_offset: int, timeout_s: float) -> bool:
        """The asyncio flavour: one loop wake-up per flush round, not one per writer."""
        return await self.gate.wait_async(end_offset, timeout_s)

    def flush_now(self, least_pages: int = 0) -> int:
        """One flush of whatever is written; returns the flushed offset."""
        commitlog = self.commitlog
        last = commitlog.files.last_file()
        store_ts = last.store_timestamp if last else 0
        target = commitlog.max_offset
        started = time.perf_counter()
        commitlog.files.flush(least_pages)
        elapsed_s = time.perf_counter() - started
        flushed = commitlog.flushed_offset
        self.fsync_count += 1
        if flushed >= target and store_ts:
            self.checkpoint.state.physic_msg_timestamp = store_ts
        if flushed > self.flushed_offset:
            if self.on_flushed is not None:  # before the appends waiting here are answered
                try:
                    self.on_flushed()
                except Exception:  # the bytes are durable: their appends still hear so
                    log.exception("the work after a flush failed")
            self.gate.advance(flushed)
            if self.on_flush_seconds is not None:
                self.on_flush_seconds(elapsed_s)
        return flushed

    # ---------------------------------------------------------------- thread
    def start(self) -> None:
        self.gate.reset(self.commitlog.flushed_offset)
        self._thread = threading.Thread(
            target=self._run, name="boltmq-flush-commitlog", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        sync = self.config.sync_flush
        interval_s = self.config.flush_interval_commitlog_ms / 1000
        thorough_s = self.config.flush_commitlog_thorough_interval_ms / 1000
        while not self._stopped:
            try:
                if sync:
                    self._request.wait(0.01)
                    self._request.clear()
                    if self.commitlog.max_offset > self.flushed_offset:
                        self.flush_now()
                else:
                    self._request.wait(interval_s)
                    self._request.clear()
                    now = time.monotonic()
                    thorough = now - self._last_thorough >= thorough_s
                    if thorough:
                        self._last_thorough = now
                    self.flush_now(0 if thorough else self.config.flush_commitlog_least_pages)
                # Every round, written or not: the window's periodic sweep must also
                # reach pages that readers brought back while nothing was written.
                self.commitlog.page_cache.release_behind(self.flushed_offset)
            except Exception:
                log.exception("CommitLog flush failed")
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the thread after a final full flush."""
        self._stopped = True
        self._request.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush_now()
        self.gate.close()


class ConsumeQueueFlusher:
    """Flushes consume queues and index files, then the checkpoint."""

    def __init__(
        self,
        config: StoreConfig,
        queues: ConsumeQueueTable,
        index: IndexService,
        checkpoint: Checkpoint,
        dispatched_timestamp: Callable[[], int],
    ) -> None:
        self.config = config
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.dispatched_timestamp = dispatched_timestamp
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_thorough = time.monotonic()

    def flush_now(self, least_pages: int = 0) -> list[ConsumeQueue]:
        """Flush queues and index, then record their timestamps in the checkpoint; the
        queues flushed."""
        logics_ts = self.dispatched_timestamp()  # taken before the flush: a lower bound
        flushed = self.queues.flush(least_pages)
        # The index is always flushed whole, so everything dispatched before the
        # flush began is durably indexed: the dispatch timestamp is its bound too
        # (the newest entry's time would leave it at 0 for a store without keys,
        # and crash recovery would then restart from the first segment).
        self.index.flush()
        state = self.checkpoint.state
        if logics_ts:
            state.index_msg_timestamp = logics_ts
            if least_pages == 0:
                state.logics_msg_timestamp = logics_ts
        self.checkpoint.flush()
        return flushed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="boltmq-flush-cq", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval_s = self.config.flush_interval_consume_queue_ms / 1000
        thorough_s = self.config.flush_consume_queue_thorough_interval_ms / 1000
        share = max(1, int(SWEEP_INTERVAL_S / 2 / interval_s)) if interval_s > 0 else 1
        while not self._stop.wait(interval_s):
            try:
                now = time.monotonic()
                thorough = now - self._last_thorough >= thorough_s
                if thorough:
                    self._last_thorough = now
                # The logics timestamp is only advanced by full flushes: a flush
                # that skipped a queue with few dirty pages proves nothing.
                flushed = self.flush_now(
                    0 if thorough else self.config.flush_consume_queue_least_pages
                )
                # Every round, as the CommitLog's window (sweeps reach what readers map):
                # the queues flushed, and a share of all, each twice a sweep interval.
                self.queues.release_behind(flushed, share)
                self.index.release_behind()
            except Exception:
                log.exception("consume-queue flush failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush_now()
