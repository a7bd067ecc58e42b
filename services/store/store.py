"""MessageStore: the facade that composes the store's parts.

It owns no format and no algorithm of its own: CommitLog appends (records a
client encoded: :mod:`services.store.record_appends`), the Dispatcher builds
consume queues and the index, flushers force pages, the Cleaner deletes,
recovery repairs, the MessageReader reads (:mod:`services.store.reader`) and
RoleChanges promotes, demotes and truncates (:mod:`services.store.role_changes`).
What stays here is the order of things: start-up and shutdown, and an append's
waits for its flush and its replica. None of the parts holds a reference back
to this facade; they are wired here with callables.

Files under the root: ``lock`` (flock'd while running, so two stores never
share a root), ``abort`` (exists while running; its presence at start means
the last run crashed), ``checkpoint``, and the data directories
(``docs/store-format.md``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from boltmq.wire.record import InvalidMessage, RecordView
from boltmq.wire.record_batch import RecordBatch
from services.store.checkpoint import Checkpoint, CheckpointState
from services.store.cleaner import Cleaner, DiskUsageProbe, disk_usage_percent
from services.store.commitlog import CommitLog, PropertiesTooLarge
from services.store.config import StoreConfig
from services.store.confirm_offset import ConfirmOffset
from services.store.consume_queue import ConsumeQueueTable
from services.store.dispatcher import ArrivalListener, Dispatcher
from services.store.errors import StoreLocked, StoreNotRunning
from services.store.flusher import CommitLogFlusher, ConsumeQueueFlusher
from services.store.index_service import IndexService
from services.store.message import MessageLike, StoreMessage
from services.store.reader import MessageReader
from services.store.record_appends import append_record_batches, append_records, same
from services.store.recovery import RecoveryReport, finish_queue_offsets, recover, redispatch
from services.store.replica_tracker import ReplicaTracker
from services.store.role import RoleChangeRefused, RoleFile, RoleState
from services.store.role_changes import RoleChanges
from services.store.status import (
    GetResult,
    PutResult,
    PutStatus,
    mark_flush_timeout,
    mark_replica_status,
)
from services.store.verify import Snapshot, verify_store

log = logging.getLogger(__name__)


class MessageStore:
    """An embedded message store (see the module docstring)."""

    def __init__(
        self, config: StoreConfig, *, disk_usage: DiskUsageProbe = disk_usage_percent
    ) -> None:
        self.config = config
        self.root = config.root_dir
        self._disk_usage = disk_usage
        self.running = False
        self._opened = False
        self._lock_fd = -1
        self._state_lock = threading.Lock()
        self.on_flush_seconds: Callable[[float], None] | None = None
        """Given to each CommitLog flusher: called with every flush's duration (metrics)."""
        self._build()

    def _build(self) -> None:
        """Fresh, unopened parts (a stopped store is started again with new ones)."""
        config = self.config
        self.commitlog = CommitLog(config)
        self.queues = ConsumeQueueTable.of_store(config)
        self.index = IndexService.of_store(config)
        self.checkpoint: Checkpoint | None = None
        self.dispatcher = Dispatcher(
            self.commitlog,
            self.queues,
            self.index,
            self._dispatch_limit,
            config.check_crc_on_recover,
        )
        self.flusher: CommitLogFlusher | None = None
        self.queue_flusher: ConsumeQueueFlusher | None = None
        self.cleaner = Cleaner(
            config, self.commitlog, self.queues, self.index, disk_usage=self._disk_usage
        )
        self.recovery: RecoveryReport | None = None
        self.load_notes: list[str] = []
        self.replicas = ReplicaTracker()
        self.confirm = ConfirmOffset(self.dispatcher)
        self.role_changes = RoleChanges(
            config,
            RoleFile(self.root),
            self.commitlog,
            self.queues,
            self.index,
            self.dispatcher,
            self.replicas,
        )
        self.reader = MessageReader(
            config, self.commitlog, self.queues, self.index, self._require_running
        )

    @property
    def role(self) -> RoleState:
        """The role the store runs as now (:class:`RoleChanges` changes it)."""
        return self.role_changes.role

    def _require_running(self) -> None:
        if not self.running:
            raise StoreNotRunning("store is not running (call start())")

    # ================================================================ lifecycle
    def start(self) -> RecoveryReport:
        """Lock the root, load every file, recover, then start background work."""
        with self._state_lock:
            if self.running:
                raise RuntimeError("store already started")
            if self._opened:
                self._build()
            self._opened = True
            self.root.mkdir(parents=True, exist_ok=True)
            self._take_lock()
            try:
                return self._start_locked()
            except BaseException:
                self._close_files()
                self._release_lock()
                raise

    def _start_locked(self) -> RecoveryReport:
        abort_path = self.root / "abort"
        clean = not abort_path.exists()
        self.checkpoint = Checkpoint(self.root / "checkpoint")
        if self.checkpoint.problem:
            self.load_notes.append(
                f"checkpoint unusable ({self.checkpoint.problem}); "
                f"recovering from the first segment"
            )
        self.load_notes.extend(self.role_changes.load())
        self.load_notes.extend(self.commitlog.files.load(repair_torn=True))
        self.load_notes.extend(self.queues.load(repair_torn=True))
        if self.queues.torn:
            # Entries were lost with a torn queue file, and a clean start only
            # re-dispatches past the furthest queue: rebuild every queue and the
            # index from the first segment instead, as after an unusable checkpoint.
            clean = False
            self.checkpoint.state = CheckpointState()
            self.load_notes.append(
                "torn consume-queue file: rebuilding consume queues and "
                "index from the first segment"
            )
        self.load_notes.extend(self.index.load(clean, self.checkpoint.state.index_msg_timestamp))
        report = recover(
            self.commitlog,
            self.queues,
            clean,
            self.checkpoint.state,
            self.config.check_crc_on_recover,
        )
        report.notes.extend(self.index.truncate_past(self.commitlog.max_offset))
        report.notes[:0] = self.load_notes
        self.recovery = report
        for note in report.notes:
            log.warning("recovery: %s", note)
        abort_path.touch()
        self.confirm.reset(self.commitlog.max_offset)
        # Re-dispatch what recovery left behind before accepting any write.
        self.dispatcher.reput_offset = report.reput_offset
        # Recovery has just checked every record from its start (CRC included):
        # re-dispatching that range need not compute each CRC a second time.
        self.dispatcher.check_crc = (
            self.config.check_crc_on_recover and report.reput_offset < report.start_offset
        )
        report.released_bytes += redispatch(self.dispatcher, self.commitlog.page_cache)
        self.dispatcher.check_crc = self.config.check_crc_on_recover
        if self.dispatcher.error:
            report.notes.append(f"dispatch stopped at a bad record: {self.dispatcher.error}")
        finish_queue_offsets(self.commitlog, self.queues)
        for cq in self.queues:
            cq.correct_min_offset(self.commitlog.min_offset)
        self.commitlog.on_append = self.dispatcher.submit
        self.dispatcher.inline = not self.config.sync_flush
        self.dispatcher.wake_on_submit = not self.config.sync_flush
        # Under SYNC_FLUSH nothing is dispatched before it is durable: the flusher
        # dispatches each round's bytes itself before it answers their appends.
        dispatcher = self.dispatcher
        on_flushed = dispatcher.dispatch_once if self.config.sync_flush else dispatcher.wake
        self.flusher = CommitLogFlusher(
            self.config, self.commitlog, self.checkpoint, on_flushed=on_flushed
        )
        self.flusher.on_flush_seconds = self.on_flush_seconds
        self.queue_flusher = ConsumeQueueFlusher(
            self.config,
            self.queues,
            self.index,
            self.checkpoint,
            lambda: self.dispatcher.last_store_timestamp,
        )
        self.commitlog.warmer.start()
        self.flusher.start()
        self.queue_flusher.start()
        self.dispatcher.start()
        self.cleaner.start()
        self.running = True
        return report

    def shutdown(self) -> None:
        """Flush, dispatch everything, write the checkpoint, remove abort, unlock."""
        with self._state_lock:
            if not self.running:
                return
            self.running = False
            self.replicas.gate.close()
            self.cleaner.stop()
            assert self.flusher is not None and self.queue_flusher is not None
            self.flusher.stop()
            self.dispatcher.stop()
            self.queue_flusher.stop()
            self._close_files()
            (self.root / "abort").unlink(missing_ok=True)
            self._release_lock()

    def _close_files(self) -> None:
        self.commitlog.close()
        self.queues.close()
        self.index.close()
        if self.checkpoint is not None:
            self.checkpoint.close()

    def _take_lock(self) -> None:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(f"{self.root} is in use by another store process") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ================================================================ writes
    def _dispatch_limit(self) -> int:
        flusher, limit = self.flusher, self.commitlog.max_offset
        if self.config.sync_flush and flusher:  # what is on disk, before its appends hear so
            limit = self.commitlog.flushed_offset
        return self.confirm.cap(limit, self.role, self.config.read_confirmed_only)

    def _refusal(self) -> PutResult | None:
        if not self.running:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="store is not running")
        if not self.role.is_master:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="replica store refuses writes")
        if self.cleaner.disk_full:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                error=f"disk above {self.config.disk_space_warning_level_ratio}%",
            )
        return None

    def put_message(self, msg: StoreMessage) -> PutResult:
        """Append one message."""
        return self.put_messages((msg,))[0]

    def put_messages(
        self, msgs: Sequence[MessageLike] | RecordBatch, born: tuple[str, int] | None = None
    ) -> Sequence[PutResult]:
        """Append a batch under one lock with one flush wait; one result per message.

        Messages that fail validation get MESSAGE_ILLEGAL or
        PROPERTIES_SIZE_EXCEEDED and are not written; the others are. ``born``
        (host, port) overrides every message's born host. A :class:`RecordBatch`
        (records a client encoded) is verified record by record and copied in
        with its store-side fields patched, the same outcomes per record.
        """
        results, end_offset, merge = self._append(msgs, born)
        if end_offset and self.config.sync_flush:
            assert self.flusher is not None
            if not self.flusher.wait_flushed(end_offset, self.config.sync_flush_timeout_ms / 1000):
                mark_flush_timeout(results)
        if end_offset and self.role.sync_master:
            status = self._replica_refusal(end_offset)
            if status is None and not self.replicas.gate.wait(end_offset, self._slave_timeout_s):
                status = PutStatus.FLUSH_SLAVE_TIMEOUT
            mark_replica_status(results, status)
        return merge(results)

    def put_record_batches(
        self, batches: Sequence[RecordBatch], borns: Sequence[tuple[str, int] | None]
    ) -> list[Sequence[PutResult]]:
        """Append client-encoded batches (any topics and queues; ``borns``: each one's born
        host) in one engine call: one result list per batch, each what ``put_messages``
        would give it (:func:`services.store.record_appends.append_record_batches`); each
        on its own where appends wait (a flush, a replica: see the async form)."""
        if self.needs_async_wait:
            return [self.put_messages(b, born) for b, born in zip(batches, borns, strict=True)]
        return self._append_batches(batches, borns)[0]

    def _append_batches(
        self, batches: Sequence[RecordBatch], borns: Sequence[tuple[str, int] | None]
    ) -> tuple[list[Sequence[PutResult]], int]:
        """The batches' results from one engine call, and the end offset (0: none written)."""
        refusal = self._refusal()
        if refusal is not None:
            status, error = refusal.status, refusal.error
            return [[PutResult(status, error=error) for _ in range(b.count)] for b in batches], 0
        before = self.commitlog.max_offset
        results = append_record_batches(self.commitlog, batches, borns, self._append)
        end_offset = self.commitlog.max_offset
        return results, end_offset if end_offset > before else 0

    async def put_messages_async(
        self, msgs: Sequence[MessageLike] | RecordBatch, born: tuple[str, int] | None = None
    ) -> Sequence[PutResult]:
        """:meth:`put_messages` for asyncio callers: the flush wait does not block the loop.

        Under SYNC_FLUSH every waiting task of a loop is woken by one callback per
        flush round, so many concurrent writers cost one wake-up, not one each.
        """
        results, end_offset, merge = self._append(msgs, born)
        await self._wait_stored(end_offset, (results,))
        return merge(results)

    async def put_record_batches_async(
        self, batches: Sequence[RecordBatch], borns: Sequence[tuple[str, int] | None]
    ) -> list[Sequence[PutResult]]:
        """:meth:`put_record_batches` in one engine call whatever the store waits for, then
        one wait (flush, replicas) for the last record of them all."""
        results, end_offset = self._append_batches(batches, borns)
        await self._wait_stored(end_offset, results)
        return results

    async def _wait_stored(self, end_offset: int, results: Sequence[Sequence[PutResult]]) -> None:
        """Wait until ``end_offset`` (0: nothing written) is flushed and replicated as the
        store's role asks; the stored ``results`` that waited too long say so."""
        if end_offset and self.config.sync_flush:
            assert self.flusher is not None
            if not await self.flusher.wait_flushed_async(
                end_offset, self.config.sync_flush_timeout_ms / 1000
            ):
                for part in results:
                    mark_flush_timeout(part)
        if end_offset and self.role.sync_master:
            status = self._replica_refusal(end_offset)
            if status is None and not await self.replicas.gate.wait_async(
                end_offset, self._slave_timeout_s
            ):
                status = PutStatus.FLUSH_SLAVE_TIMEOUT
            for part in results:
                mark_replica_status(part, status)

    @property
    def needs_async_wait(self) -> bool:
        """Whether appends wait for something (a flush or a replica): use the async path."""
        return self.config.sync_flush or self.role.sync_master

    @property
    def _slave_timeout_s(self) -> float:
        return self.config.slave_timeout_ms / 1000

    def _replica_refusal(self, end_offset: int) -> PutStatus | None:
        """SLAVE_NOT_AVAILABLE when no replica is within the in-sync gap (``docs/ha.md``)."""
        if self.replicas.gate.offset >= end_offset:
            return None
        if not self.replicas.in_sync(
            self.commitlog.max_offset, self.config.ha_max_gap_not_in_sync_bytes
        ):
            return PutStatus.SLAVE_NOT_AVAILABLE
        return None

    def _append(
        self, msgs: Sequence[MessageLike] | RecordBatch, born: tuple[str, int] | None = None
    ) -> tuple[Sequence[PutResult], int, Callable[[Sequence[PutResult]], Sequence[PutResult]]]:
        """Encode and append; returns results, the batch end offset (0: nothing written)
        and a function that merges in the results of rejected messages."""
        refusal = self._refusal()
        if refusal is not None:
            refused = [PutResult(refusal.status, error=refusal.error) for _ in range(len(msgs))]
            return refused, 0, same
        now_ms = time.time_ns() // 1_000_000
        encode = self.commitlog.encode
        encoded = []
        rejected: dict[int, PutResult] = {}
        try:
            born_host = self.commitlog.encode_born_host(*born) if born is not None else None
        except (InvalidMessage, ValueError) as exc:
            refused = [
                PutResult(PutStatus.MESSAGE_ILLEGAL, error=str(exc)) for _ in range(len(msgs))
            ]
            return refused, 0, same
        if isinstance(msgs, RecordBatch):
            return append_records(self.commitlog, msgs, born, born_host, now_ms, self._append)
        for i, msg in enumerate(msgs):
            try:
                encoded.append(encode(msg, now_ms, born_host))
            except PropertiesTooLarge as exc:
                rejected[i] = PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, error=str(exc))
            except (InvalidMessage, TypeError, AttributeError) as exc:
                rejected[i] = PutResult(PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        if not encoded:
            return [rejected[i] for i in range(len(msgs))], 0, same
        results, batch = self.commitlog.append(encoded, now_ms)
        if not rejected:
            return results, batch.end_offset, same

        def merge(stored_results: Sequence[PutResult]) -> Sequence[PutResult]:
            stored = iter(stored_results)
            return [rejected[i] if i in rejected else next(stored) for i in range(len(msgs))]

        return results, batch.end_offset, merge

    # ================================================================ replication and roles
    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append replicated CommitLog bytes at ``offset``; the new max offset.

        Replica stores only (RoleChangeRefused otherwise: a master's own
        appends assign queue offsets that raw bytes would duplicate).
        CorruptRecord or ValueError when the bytes are not whole valid records
        that belong exactly at the CommitLog's end; nothing is written then.
        """
        self._require_running()
        if self.role.is_master:
            raise RoleChangeRefused(
                f"raw appends are for replica stores (broker_role=SLAVE); "
                f"this store is {self.role.broker_role}"
            )
        end = self.commitlog.append_raw(offset, data)
        self.confirm.raise_to(end, dispatch_now=True)
        return end

    def report_replica(self, address: str, acked_offset: int, disconnected: bool = False) -> None:
        """What the HA service says of one replica (master side)."""
        max_offset = self.commitlog.max_offset
        if disconnected:
            self.replicas.forget(address)
        elif self.role.is_master:  # dispatched before acknowledged: read-your-writes
            self.confirm.raise_to(min(acked_offset, max_offset), dispatch_now=True)
        if not disconnected:
            self.replicas.report(address, acked_offset, max_offset)

    def promote(self, epoch: int = 0, broker_id: int = 0) -> RoleState:
        """Turn this replica into a master of a new epoch (:meth:`RoleChanges.promote`)."""
        self._require_running()
        with self._state_lock:
            if not self.role.is_master:  # all it holds is the new epoch's past
                self.confirm.raise_to(self.commitlog.max_offset)
            return self.role_changes.promote(epoch, broker_id, self.wait_dispatched)

    def demote(
        self,
        epoch: int = 0,
        epochs: Sequence[tuple[int, int]] = (),
        broker_id: int = -1,
        *,
        only_if_replica: bool = False,
    ) -> RoleState:
        """Follow a master (of ``epoch``, with its epoch history): client writes are refused.

        With ``only_if_replica`` a master is left alone (RoleChangeRefused): the
        HA follower's bookkeeping must never undo a promotion.
        """
        self._require_running()
        with self._state_lock:
            return self.role_changes.demote(epoch, epochs, broker_id, only_if_replica)

    def truncate(self, offset: int) -> int:
        """Cut a replica's CommitLog back to ``offset``; the bytes cut (RoleChanges.truncate)."""
        self._require_running()
        cut = self.role_changes.truncate(offset, self.flusher)
        self.confirm.lower_to(self.commitlog.max_offset)
        return cut

    # ================================================================ reads
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int | None = None,
        subscription: str | None = None,
        max_bytes: int | None = None,
        *,
        raw: bool = False,
        cold_bytes: int = 0,
    ) -> GetResult:
        """Read up to ``max_count`` messages from ``queue_offset`` that match ``subscription``.

        With ``raw``, ``result.raw`` holds each record's bytes (views of the
        mapping, checked but not decoded) and ``result.messages`` stays empty:
        what a server passing records on needs (:meth:`MessageReader.get_messages`,
        which says what ``cold_bytes`` is).
        """
        return self.reader.get_messages(
            topic,
            queue_id,
            queue_offset,
            max_count,
            subscription,
            max_bytes,
            raw=raw,
            cold_bytes=cold_bytes,
        )

    def look_message(self, commitlog_offset: int) -> RecordView | None:
        """The message whose record starts at ``commitlog_offset``; None if none is there."""
        return self.reader.look_message(commitlog_offset)

    def view_message(self, msg_id: str) -> RecordView | None:
        """The message with this offset MessageId (no index needed); ValueError if malformed."""
        return self.reader.view_message(msg_id)

    def query_messages(
        self,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> list[RecordView]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY equals ``key`` in the time range."""
        return self.reader.query_messages(topic, key, max_count, begin_ms, end_ms)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after ``timestamp_ms`` (0 for an unknown queue)."""
        self._require_running()
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp_ms, self.commitlog.store_time_of)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest queue offset still readable (0 for an unknown queue)."""
        self._require_running()
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset() if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Queue offset the next message will get (0 for an unknown queue)."""
        self._require_running()
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset() if cq else 0

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Call ``listener(topic, queue_id, max_offset)`` after each dispatch round."""
        self.dispatcher.listeners.append(listener)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        """Stop calling ``listener`` (the same object that was added).

        Copy-on-write: the dispatcher may be iterating the old list on its
        thread; it finishes that round with it (one more call at most).
        """
        self.dispatcher.listeners = [
            known for known in self.dispatcher.listeners if known is not listener
        ]

    def wait_dispatched(self, timeout_s: float = 30.0) -> bool:
        """Block until everything appended so far is in the consume queues."""
        target = self._dispatch_limit()
        self.dispatcher.wake()
        return self.dispatcher.wait_dispatched(target, timeout_s)

    def flush(self) -> None:
        """Force the CommitLog, consume queues, index and checkpoint to disk now."""
        self._require_running()
        if self.flusher is not None:
            self.flusher.flush_now()
        self.wait_dispatched()
        if self.queue_flusher is not None:
            self.queue_flusher.flush_now()

    def verify(self) -> list[str]:
        """Every inconsistency between CommitLog, consume queues and index (empty: sound).

        Safe beside writes: only what was dispatched when it started is checked
        (services/store/verify.py).
        """
        self._require_running()
        with self.dispatcher.paused():
            snapshot = Snapshot.of(self.queues, self.dispatcher.reput_offset)
        snapshot.pause = self.dispatcher.paused
        return verify_store(self.commitlog, self.queues, self.index, snapshot)
