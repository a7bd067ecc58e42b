"""Flushers: the threads that force dirty pages to disk.

- :class:`CommitLogFlusher` in ASYNC_FLUSH mode forces the CommitLog every
  ``flush_interval_commitlog_ms`` when ``flush_commitlog_least_pages`` pages are
  dirty, and fully every ``flush_commitlog_thorough_interval_ms``.
- In SYNC_FLUSH mode it is a group commit: appenders call :meth:`wait_flushed`
  with their end offset; the thread fsyncs everything written so far and wakes
  every appender whose end is now durable, so one fsync serves many appends.
- :class:`ConsumeQueueFlusher` forces consume queues and the index every
  ``flush_interval_consume_queue_ms`` and then writes the checkpoint.

All fsyncs run on these threads (``os.fdatasync`` releases the GIL), never on
an event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from services.store.checkpoint import Checkpoint
from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueueTable
from services.store.index_service import IndexService

log = logging.getLogger(__name__)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class CommitLogFlusher:
    """Async flush or group commit for the CommitLog."""

    def __init__(self, config: StoreConfig, commitlog: CommitLog, checkpoint: Checkpoint,
                 on_flushed: Callable[[], None] | None = None) -> None:
        self.config = config
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.on_flushed = on_flushed
        self.flushed_offset = commitlog.max_offset
        self.fsync_count = 0
        self._request = threading.Event()
        # Group commit waiters: (end_offset, lock held until that offset is durable).
        # One lock per waiter, released by the flusher: a woken writer needs only
        # the GIL, where a shared Condition would make all of them queue again on
        # the condition's lock (measured: a lock convoy that halved throughput).
        self._waiters: list[tuple[int, threading.Lock]] = []
        self._async_waiters: list[
            tuple[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = []
        self._waiters_lock = threading.Lock()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._last_thorough = time.monotonic()

    # ---------------------------------------------------------------- group commit
    def wait_flushed(self, end_offset: int, timeout_s: float) -> bool:
        """Block until ``end_offset`` is durable; False on timeout (FLUSH_DISK_TIMEOUT)."""
        if self.flushed_offset >= end_offset:
            return True
        gate = threading.Lock()
        gate.acquire()
        with self._waiters_lock:
            if self.flushed_offset >= end_offset or self._stopped:
                return self.flushed_offset >= end_offset
            self._waiters.append((end_offset, gate))
        self._request.set()
        if gate.acquire(timeout=max(timeout_s, 0.0)):
            return True
        with self._waiters_lock:
            try:
                self._waiters.remove((end_offset, gate))
            except ValueError:
                pass  # released at the same moment: the flush made it
        return self.flushed_offset >= end_offset

    async def wait_flushed_async(self, end_offset: int, timeout_s: float) -> bool:
        """The asyncio flavour: one loop wake-up per flush round, not one per writer."""
        if self.flushed_offset >= end_offset:
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (end_offset, (loop, future))
        with self._waiters_lock:
            if self.flushed_offset >= end_offset or self._stopped:
                return self.flushed_offset >= end_offset
            self._async_waiters.append(entry)
        self._request.set()
        try:
            await asyncio.wait_for(asyncio.shield(future), max(timeout_s, 0.0))
        except TimeoutError:
            with self._waiters_lock:
                if entry in self._async_waiters:
                    self._async_waiters.remove(entry)
        return self.flushed_offset >= end_offset

    def _release_waiters(self, flushed: int, release_all: bool = False) -> None:
        with self._waiters_lock:
            self.flushed_offset = max(self.flushed_offset, flushed)
            keep = []
            for end_offset, gate in self._waiters:
                if end_offset <= flushed or release_all:
                    gate.release()
                else:
                    keep.append((end_offset, gate))
            self._waiters = keep
            if not self._async_waiters:
                return
            ready: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            keep_async = []
            for end_offset, (loop, future) in self._async_waiters:
                if end_offset <= flushed or release_all:
                    ready.setdefault(loop, []).append(future)
                else:
                    keep_async.append((end_offset, (loop, future)))
            self._async_waiters = keep_async
        for loop, futures in ready.items():
            try:
                loop.call_soon_threadsafe(_resolve, futures)
            except RuntimeError:
                pass  # the loop is closed: nobody is waiting any more

    def flush_now(self, least_pages: int = 0) -> int:
        """One flush of whatever is written; returns the flushed offset."""
        commitlog = self.commitlog
        last = commitlog.files.last_file()
        store_ts = last.store_timestamp if last else 0
        target = commitlog.max_offset
        commitlog.files.flush(least_pages)
        flushed = commitlog.flushed_offset
        self.fsync_count += 1
        if flushed >= target and store_ts:
            self.checkpoint.state.physic_msg_timestamp = store_ts
        if flushed > self.flushed_offset:
            self._release_waiters(flushed)
            if self.on_flushed is not None:
                self.on_flushed()
        return flushed

    # ---------------------------------------------------------------- thread
    def start(self) -> None:
        self.flushed_offset = self.commitlog.flushed_offset
        self._thread = threading.Thread(target=self._run, name="boltmq-flush-commitlog",
                                        daemon=True)
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
        self._release_waiters(self.flushed_offset, release_all=True)


class ConsumeQueueFlusher:
    """Flushes consume queues and index files, then the checkpoint."""

    def __init__(self, config: StoreConfig, queues: ConsumeQueueTable, index: IndexService,
                 checkpoint: Checkpoint, dispatched_timestamp: Callable[[], int]) -> None:
        self.config = config
        self.queues = queues
        self.index = index
        self.checkpoint = checkpoint
        self.dispatched_timestamp = dispatched_timestamp
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_thorough = time.monotonic()

    def flush_now(self, least_pages: int = 0) -> None:
        """Flush queues and index, then record their timestamps in the checkpoint."""
        logics_ts = self.dispatched_timestamp()  # taken before the flush: a lower bound
        self.queues.flush(least_pages)
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

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="boltmq-flush-cq", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval_s = self.config.flush_interval_consume_queue_ms / 1000
        thorough_s = self.config.flush_consume_queue_thorough_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                now = time.monotonic()
                thorough = now - self._last_thorough >= thorough_s
                if thorough:
                    self._last_thorough = now
                # The logics timestamp is only advanced by full flushes: a flush
                # that skipped a queue with few dirty pages proves nothing.
                self.flush_now(0 if thorough else self.config.flush_consume_queue_least_pages)
            except Exception:
                log.exception("consume-queue flush failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush_now()
