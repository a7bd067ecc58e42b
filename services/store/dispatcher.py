"""Dispatcher: turns CommitLog records into consume-queue and index entries.

``reput_offset`` is how far the CommitLog has been dispatched. Appends hand
their dispatch requests over in order (no decoding of what was just encoded);
anything else behind the limit (raw HA appends, a restart) is decoded from the
CommitLog. Under SYNC_FLUSH the limit is the flushed offset, so a consumer
never sees a message that a crash could take back; otherwise it is the
committed offset. Under SYNC_MASTER and on replicas it is also capped at the
confirm offset (what a replica acknowledged), so a consumer never sees a
message that a failover could take back (``docs/ha.md``).

After each round the dispatcher reports arrivals ``(topic, queue_id,
max_offset)`` to listeners (the broker's long polls).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator

from boltmq.wire.record import SYS_FLAG_TRANSACTION_COMMIT, SYS_FLAG_TRANSACTION_MASK, CorruptRecord
from services.store.commitlog import (
    AppendBatch,
    CommitLog,
    DispatchRequest,
    dispatch_request_of,
)
from services.store.consume_queue import ConsumeQueueTable
from services.store.dispatch_run import DispatchParts, DispatchRun, DispatchTuple
from services.store.index_service import IndexEntry, IndexService

log = logging.getLogger(__name__)

ArrivalListener = Callable[[str, int, int], None]
DISPATCH_DECODE_BATCH_MAX = 4096
"""Records decoded from disk per round at most, so a big backlog never starves appends."""


class Dispatcher:
    """The reput service: one background thread."""

    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        index: IndexService,
        limit: Callable[[], int],
        check_crc: bool,
    ) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.limit = limit
        self.check_crc = check_crc
        self.reput_offset = 0
        self.last_store_timestamp = 0
        self.listeners: list[ArrivalListener] = []
        self.append_listeners: list[Callable[[], None]] = []
        """Called on every append, before it is dispatched (a following ReadCommitLog:
        under SYNC_MASTER dispatch waits for the replica, which waits for these bytes).
        Replaced whole, never changed in place (copy-on-write, as ``listeners``)."""
        self.error: str = ""
        self._pending: collections.deque[AppendBatch] = collections.deque()
        self._wake = threading.Event()
        self._progress = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._waiters = 0
        # One round of applying at a time: the thread and inline appends never interleave.
        self._apply_lock = threading.Lock()
        self.wake_on_submit = True
        """Wake the thread per append; off under SYNC_FLUSH, where the flusher wakes it
        (nothing can be dispatched before it is flushed)."""
        self.inline = False
        """Apply appended batches on the appending thread (set by the store for ASYNC_FLUSH)."""

    # ---------------------------------------------------------------- input
    def submit(self, batch: AppendBatch) -> None:
        """Take an append's requests (called under the append lock, in CommitLog order).

        With ``inline`` set (ASYNC_FLUSH) and nothing queued, the batch is
        applied at once on the appending thread: the GIL serialises the work
        anyway, and a hand-off to the dispatcher thread only adds switches
        (measured: ~30 % of batch throughput). Otherwise it is queued for the
        thread, which applies it once the limit (the flushed offset) allows.
        """
        for listener in self.append_listeners:
            listener()
        if self.inline:
            with self._apply_lock:
                self._skip_missing()
                if batch.end_offset <= self.reput_offset:
                    return  # the thread already read these records from disk
                if (
                    not self._pending
                    and batch.start_offset == self.reput_offset
                    and batch.end_offset <= self.limit()
                ):
                    touched: dict[tuple[str, int], None] = {}
                    self._apply(batch.requests, touched)
                    self.reput_offset = batch.end_offset
                    if self._waiters:
                        with self._progress:
                            self._progress.notify_all()
                    self.notify(touched)
                    return
                # The thread is part-way through: catch up here, so a put still
                # returns only once its records are dispatched (read-your-writes);
                # past the confirm offset they wait for it (docs/ha.md).
                self._pending.append(batch)
                self._dispatch_locked()
                return
        self._pending.append(batch)
        if self.wake_on_submit:
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No dispatch round runs inside (a truncation rewinds the dispatcher here)."""
        with self._apply_lock:
            yield

    def rewind(self, offset: int) -> None:
        """Dispatch again from ``offset`` at the latest (inside :meth:`paused`)."""
        self.reput_offset = min(self.reput_offset, offset)
        self._pending.clear()

    # ---------------------------------------------------------------- work
    def dispatch_once(self) -> int:
        """Dispatch everything below the limit; returns records dispatched."""
        with self._apply_lock:
            return self._dispatch_locked()

    def _skip_missing(self) -> None:
        """Never dispatch below the CommitLog's first byte: a replica that started
        mid-stream (its first segment is the master's last) has nothing there."""
        if self.reput_offset < self.commitlog.min_offset:
            self.reput_offset = self.commitlog.min_offset

    def _dispatch_locked(self) -> int:
        self._skip_missing()
        limit = self.limit()
        done = 0
        touched: dict[tuple[str, int], None] = {}
        while self.reput_offset < limit:
            batch = self._take_pending()
            if batch is not None and batch.end_offset <= limit:
                self._apply(batch.requests, touched)
                done += len(batch.requests)
                self.reput_offset = batch.end_offset
                continue
            if batch is not None:  # not wholly below the limit: its records below it, from disk
                self._pending.appendleft(batch)
            done += self._dispatch_from_disk(limit, touched)
            break
        if done:
            with self._progress:
                self._progress.notify_all()
            self.notify(touched)
        return done

    def _take_pending(self) -> AppendBatch | None:
        pending = self._pending
        while pending:
            batch = pending[0]
            if batch.end_offset <= self.reput_offset:
                pending.popleft()  # already dispatched from disk
                continue
            if batch.start_offset == self.reput_offset:
                return pending.popleft()
            return None
        return None

    def _dispatch_from_disk(self, limit: int, touched: dict[tuple[str, int], None]) -> int:
        requests: list[DispatchRequest] = []
        end = self.reput_offset
        try:
            for offset, record in self.commitlog.walk(self.reput_offset, check_crc=self.check_crc):
                if offset >= limit or len(requests) >= DISPATCH_DECODE_BATCH_MAX:
                    break
                if record is None:  # blank: skip to the next segment
                    mf = self.commitlog.files.find(offset)
                    end = mf.file_end_offset if mf else limit
                    continue
                if offset + record.total_size > limit:
                    break  # the record is not wholly below the limit yet
                requests.append(dispatch_request_of(record))
                end = offset + record.total_size
        except CorruptRecord as exc:
            # Never dispatch past a bad record: consumers would read garbage.
            self.error = str(exc)
            log.error("dispatch stopped: %s", exc)
        self._apply(requests, touched)
        self.reput_offset = max(self.reput_offset, end)
        return len(requests)

    def _apply(
        self, requests: Iterable[DispatchTuple], touched: dict[tuple[str, int], None]
    ) -> None:
        """Every request's consume-queue entry and index keys. The keys of records handed
        over one by one (from disk, or the one-record sections of an append of many
        topics) are indexed together at the end, or before a run's, in CommitLog order."""
        keyed: list[IndexEntry] = []
        self._apply_into(requests, touched, keyed)
        if keyed:
            self.index.build_index_many(keyed)

    def _apply_into(
        self,
        requests: Iterable[DispatchTuple],
        touched: dict[tuple[str, int], None],
        keyed: list[IndexEntry],
    ) -> None:
        if isinstance(requests, DispatchRun):
            if keyed:  # the records before the run first: the index stays in CommitLog order
                self.index.build_index_many(keyed)
                keyed.clear()
            self._apply_run(requests, touched)
            return
        if isinstance(requests, DispatchParts):
            for part in requests.parts:
                self._apply_into(part, touched, keyed)
            return
        queues = self.queues
        last_ts = self.last_store_timestamp
        get_queue = queues.queues.get
        for (
            topic,
            queue_id,
            physical,
            size,
            code,
            store_ts,
            queue_offset,
            index_keys,
            sys_flag,
        ) in requests:
            if sys_flag & SYS_FLAG_TRANSACTION_MASK in (0, SYS_FLAG_TRANSACTION_COMMIT):
                key = (topic, queue_id)
                cq = get_queue(key) or queues.get_or_create(topic, queue_id)
                cq.put(queue_offset, physical, size, code, store_ts)
                touched[key] = None
            if index_keys:
                keyed.append((topic, index_keys, physical, store_ts))
            last_ts = store_ts
        self.last_store_timestamp = last_ts

    def _apply_run(self, run: DispatchRun, touched: dict[tuple[str, int], None]) -> None:
        """A bulk append's records: their entries in one write, then any index keys."""
        key = (run.topic, run.queue_id)
        queues = self.queues
        cq = queues.queues.get(key) or queues.get_or_create(*key)
        cq.put_run(
            run.first_queue_offset,
            run.commitlog_offsets,
            run.sizes,
            run.tags_codes,
            run.store_timestamp,
        )
        touched[key] = None
        if any(run.index_keys):
            self.index.build_index_run(
                run.topic, run.index_keys, run.commitlog_offsets.tolist(), run.store_timestamp
            )
        self.last_store_timestamp = run.store_timestamp

    def notify(self, touched: dict[tuple[str, int], None]) -> None:
        """Note the touched queues for the flusher; tell the arrival listeners each
        one's max offset now."""
        self.queues.written(touched)
        if not self.listeners:
            return
        for topic, queue_id in touched:
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                continue
            for listener in self.listeners:
                try:
                    listener(topic, queue_id, cq.max_offset())
                except Exception:  # a listener's failure must not stop dispatch
                    log.exception("arrival listener failed")

    # ---------------------------------------------------------------- waiting
    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until reput_offset >= offset (or timeout); True when reached."""
        with self._progress:
            self._waiters += 1
            try:
                self._progress.wait_for(
                    lambda: self.reput_offset >= offset or self._stopped, timeout_s
                )
            finally:
                self._waiters -= 1
            return self.reput_offset >= offset

    # ---------------------------------------------------------------- thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="boltmq-dispatcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(0.05)
            self._wake.clear()
            try:
                while self.dispatch_once():
                    pass
            except Exception:
                log.exception("dispatcher round failed")

    def stop(self) -> None:
        """Dispatch what is left below the limit and stop the thread."""
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        while self.dispatch_once():
            pass
        with self._progress:
            self._progress.notify_all()
