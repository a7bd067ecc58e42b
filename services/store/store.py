"""MessageStore: the facade that composes the store's parts.

It owns no format and no algorithm of its own: CommitLog appends, the
Dispatcher builds consume queues and the index, flushers force pages, the
Cleaner deletes, recovery repairs. None of the parts holds a reference back to
this facade; they are wired here with callables.

Files under the root: ``lock`` (flock'd while running, so two stores never
share a root), ``abort`` (exists while running; its presence at start means
the last run crashed), ``checkpoint``, and the data directories.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from boltmq.wire.pulled_records import verified_runs
from boltmq.wire.record import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    CorruptRecord,
    InvalidMessage,
    RecordView,
    decode_record,
    parse_msg_id,
)
from boltmq.wire.record_batch import RAW_BORN_HOST_DEFAULT, RecordBatch, decode_batch
from boltmq.wire.topic import InvalidSubscription, parse_subscription
from services.store.checkpoint import Checkpoint, CheckpointState
from services.store.cleaner import Cleaner, DiskUsageProbe, disk_usage_percent
from services.store.commitlog import CommitLog, PropertiesTooLarge
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueueTable
from services.store.dispatcher import ArrivalListener, Dispatcher
from services.store.flusher import CommitLogFlusher, ConsumeQueueFlusher
from services.store.index_service import IndexService
from services.store.mapped_file import MappedFile
from services.store.message import Message, MessageLike
from services.store.recovery import RecoveryReport, finish_queue_offsets, recover
from services.store.replica_tracker import ReplicaTracker
from services.store.role import MASTER_ROLES, RoleChangeRefused, RoleFile, RoleState
from services.store.status import GetResult, GetStatus, PutResult, PutStatus, StoredRun
from services.store.verify import verify_store

log = logging.getLogger(__name__)

RECOVERY_DISPATCH_TIMEOUT_S = 3600.0


class StoreLocked(RuntimeError):
    """Another process holds the store's lock file."""


class StoreNotRunning(RuntimeError):
    """An operation that needs a started store."""


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
        self.queues = ConsumeQueueTable(self.root / "consumequeue", config.consume_queue_file_size)
        self.index = IndexService(
            self.root / "index", config.max_hash_slot_num, config.max_index_num
        )
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
        self.role_file = RoleFile(self.root)
        self.role = RoleState(config.broker_role)
        self.replicas = ReplicaTracker()

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
        self.role = self._load_role()
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
        # Re-dispatch what recovery left behind before accepting any write.
        self.dispatcher.reput_offset = report.reput_offset
        # Recovery has just checked every record from its start (CRC included):
        # re-dispatching that range need not compute each CRC a second time.
        self.dispatcher.check_crc = (
            self.config.check_crc_on_recover and report.reput_offset < report.start_offset
        )
        while self.dispatcher.dispatch_once():
            pass
        self.dispatcher.check_crc = self.config.check_crc_on_recover
        if self.dispatcher.error:
            report.notes.append(f"dispatch stopped at a bad record: {self.dispatcher.error}")
        finish_queue_offsets(self.commitlog, self.queues)
        for cq in self.queues:
            cq.correct_min_offset(self.commitlog.min_offset)
        self.commitlog.on_append = self.dispatcher.submit
        self.dispatcher.inline = not self.config.sync_flush
        self.dispatcher.wake_on_submit = not self.config.sync_flush
        self.flusher = CommitLogFlusher(
            self.config, self.commitlog, self.checkpoint, on_flushed=self.dispatcher.wake
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

    def _load_role(self) -> RoleState:
        """The saved role; a master keeps the configured flavour (ASYNC or SYNC)."""
        role, note = self.role_file.load(self.config.broker_role)
        if note:
            self.load_notes.append(note)
        if role.is_master and self.config.broker_role in MASTER_ROLES:
            role.broker_role = self.config.broker_role
        return role

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
        if self.config.sync_flush and self.flusher is not None:
            return self.flusher.flushed_offset
        return self.commitlog.max_offset

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

    def put_message(self, msg: Message) -> PutResult:
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
                _mark_flush_timeout(results)
        if end_offset and self.role.sync_master:
            status = self._replica_refusal(end_offset)
            if status is None and not self.replicas.gate.wait(end_offset, self._slave_timeout_s):
                status = PutStatus.FLUSH_SLAVE_TIMEOUT
            _mark_replica_status(results, status)
        return merge(results)

    async def put_messages_async(
        self, msgs: Sequence[MessageLike] | RecordBatch, born: tuple[str, int] | None = None
    ) -> Sequence[PutResult]:
        """:meth:`put_messages` for asyncio callers: the flush wait does not block the loop.

        Under SYNC_FLUSH every waiting task of a loop is woken by one callback per
        flush round, so many concurrent writers cost one wake-up, not one each.
        """
        results, end_offset, merge = self._append(msgs, born)
        if end_offset and self.config.sync_flush:
            assert self.flusher is not None
            if not await self.flusher.wait_flushed_async(
                end_offset, self.config.sync_flush_timeout_ms / 1000
            ):
                _mark_flush_timeout(results)
        if end_offset and self.role.sync_master:
            status = self._replica_refusal(end_offset)
            if status is None and not await self.replicas.gate.wait_async(
                end_offset, self._slave_timeout_s
            ):
                status = PutStatus.FLUSH_SLAVE_TIMEOUT
            _mark_replica_status(results, status)
        return merge(results)

    @property
    def needs_async_wait(self) -> bool:
        """Whether appends wait for something (a flush or a replica): use the async path."""
        return self.config.sync_flush or self.role.sync_master

    @property
    def _slave_timeout_s(self) -> float:
        return self.config.slave_timeout_ms / 1000

    def _replica_refusal(self, end_offset: int) -> PutStatus | None:
        """SLAVE_NOT_AVAILABLE when no replica is within the in-sync gap (DESIGN 7)."""
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
            return refused, 0, _same
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
            return refused, 0, _same
        if isinstance(msgs, RecordBatch):
            return self._append_records(msgs, born, born_host, now_ms)
        for i, msg in enumerate(msgs):
            try:
                encoded.append(encode(msg, now_ms, born_host))
            except PropertiesTooLarge as exc:
                rejected[i] = PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, error=str(exc))
            except (InvalidMessage, TypeError, AttributeError) as exc:
                rejected[i] = PutResult(PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        if not encoded:
            return [rejected[i] for i in range(len(msgs))], 0, _same
        results, batch = self.commitlog.append(encoded, now_ms)
        if not rejected:
            return results, batch.end_offset, _same

        def merge(stored_results: Sequence[PutResult]) -> Sequence[PutResult]:
            stored = iter(stored_results)
            return [rejected[i] if i in rejected else next(stored) for i in range(len(msgs))]

        return results, batch.end_offset, merge

    def _append_records(
        self, batch: RecordBatch, born: tuple[str, int] | None, born_host: bytes | None, now_ms: int
    ) -> tuple[Sequence[PutResult], int, Callable[[Sequence[PutResult]], Sequence[PutResult]]]:
        """_append of client-encoded records: verify every one, then copy and patch.

        Hosts that need the 20-byte IPv6 form do not fit the records' 8-byte
        placeholders; then the verified records are decoded and appended
        through the per-message path instead.
        """
        checked, rejected = self.commitlog.check_records(batch)
        if not checked:
            return [rejected[i] for i in range(batch.count)], 0, _same
        born_host = born_host or RAW_BORN_HOST_DEFAULT
        if len(born_host) == 8 and len(self.commitlog.store_host) == 8:
            results, appended = self.commitlog.append_records(
                batch.records, checked, batch.topic, batch.queue_id, born_host, now_ms
            )
            end_offset = appended.end_offset
            inner_merge: Callable[[Sequence[PutResult]], Sequence[PutResult]] = _same
        else:
            results, end_offset, inner_merge = self._append(decode_batch(batch, checked), born)
        if not rejected:
            return results, end_offset, inner_merge

        def merge(stored_results: Sequence[PutResult]) -> Sequence[PutResult]:
            stored = iter(inner_merge(stored_results))
            return [rejected[i] if i in rejected else next(stored) for i in range(batch.count)]

        return results, end_offset, merge

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
        self.dispatcher.wake()
        return end

    def report_replica(self, address: str, acked_offset: int, disconnected: bool = False) -> None:
        """What the HA service says of one replica (master side)."""
        if disconnected:
            self.replicas.forget(address)
        else:
            self.replicas.report(address, acked_offset, self.commitlog.max_offset)

    def promote(self, epoch: int = 0, broker_id: int = 0) -> RoleState:
        """Turn this replica into a master of a new epoch; writes are accepted after it.

        Everything received is dispatched first and the next queue offset of
        every queue is rebuilt from the consume queues, so new appends
        continue each queue where replication left it.
        """
        self._require_running()
        with self._state_lock:
            if self.role.is_master:
                raise RoleChangeRefused(
                    f"store is already {self.role.broker_role} (epoch {self.role.epoch})"
                )
            self.wait_dispatched()
            with self.commitlog.lock, self.dispatcher.paused():
                finish_queue_offsets(self.commitlog, self.queues)
                role = RoleState(
                    self.role.broker_role,
                    self.role.epoch,
                    list(self.role.epochs),
                    self.role.broker_id,
                )
                role.promote(self.config.promoted_broker_role, epoch, self.commitlog.max_offset)
                role.broker_id = broker_id
                self.role_file.save(role)
                self.replicas.reset(self.commitlog.max_offset)
                self.role = role
        log.warning(
            "store promoted to %s, epoch %d from CommitLog offset %d",
            role.broker_role,
            role.epoch,
            self.commitlog.max_offset,
        )
        return role

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
            if only_if_replica and self.role.is_master:
                raise RoleChangeRefused(
                    f"the store is {self.role.broker_role} (epoch "
                    f"{self.role.epoch}); only_if_replica refuses to demote it"
                )
            role = RoleState(
                self.role.broker_role, self.role.epoch, list(self.role.epochs), self.role.broker_id
            )
            role.demote(epoch, list(epochs), broker_id)
            self.role_file.save(role)
            self.role = role
            self.replicas.gate.close()  # SYNC_MASTER appends still waiting give up now
        return role

    def truncate(self, offset: int) -> int:
        """Cut the CommitLog back to ``offset`` (a record boundary), with what derives from it.

        Replica stores only. Consume queues and index entries past the cut go
        too, and the cut bytes are zeroed (a crash cannot bring them back).
        Returns how many bytes were cut.
        """
        self._require_running()
        if self.role.is_master:
            raise RoleChangeRefused("only a replica store can be truncated")
        commitlog = self.commitlog
        if not commitlog.min_offset <= offset <= commitlog.max_offset:
            raise ValueError(
                f"offset {offset} is outside the CommitLog "
                f"[{commitlog.min_offset}, {commitlog.max_offset}]"
            )
        if not commitlog.is_record_start(offset):
            raise ValueError(f"offset {offset} is not the start of a record")
        if offset == commitlog.max_offset:
            return 0
        with commitlog.lock, self.dispatcher.paused():
            cut = commitlog.files.truncate_to(offset)
            shortened = {
                (cq.topic, cq.queue_id): None for cq in self.queues if cq.truncate_past(offset)
            }
            notes = self.index.truncate_past(offset)
            self.dispatcher.rewind(offset)
            finish_queue_offsets(commitlog, self.queues)
            if self.flusher is not None and self.flusher.flushed_offset > offset:
                self.flusher.gate.reset(offset)
        # Watchers hear of every queue that lost entries as of an arrival: what they knew
        # of its end (a broker's kept "nothing new" answer) no longer holds.
        self.dispatcher.notify(shortened)
        for note in notes:
            log.warning("truncate: %s", note)
        log.warning("CommitLog truncated to %d: %d bytes cut", offset, cut)
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
    ) -> GetResult:
        """Read up to ``max_count`` messages from ``queue_offset`` that match ``subscription``.

        With ``raw``, ``result.raw`` holds each record's bytes (views of the
        mapping, checked but not decoded) and ``result.messages`` stays empty:
        what a server passing records on needs.
        """
        self._require_running()
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0)
        try:
            sub = parse_subscription(subscription)
        except InvalidSubscription:
            return GetResult(
                GetStatus.NO_MATCHED_MESSAGE,
                next_begin_offset=queue_offset,
                min_offset=cq.min_offset(),
                max_offset=cq.max_offset(),
            )
        min_offset, max_offset = cq.min_offset(), cq.max_offset()
        result = GetResult(
            GetStatus.NO_MATCHED_MESSAGE, min_offset=min_offset, max_offset=max_offset
        )
        if max_offset == 0:
            result.status, result.next_begin_offset = GetStatus.NO_MESSAGE_IN_QUEUE, 0
        elif queue_offset < min_offset:
            result.status, result.next_begin_offset = GetStatus.OFFSET_TOO_SMALL, min_offset
        elif queue_offset == max_offset:
            result.status, result.next_begin_offset = GetStatus.OFFSET_OVERFLOW_ONE, queue_offset
        elif queue_offset > max_offset:
            result.status = GetStatus.OFFSET_OVERFLOW_BADLY
            result.next_begin_offset = min_offset if min_offset == 0 else max_offset
        else:
            self._collect(cq, queue_offset, max_count, max_bytes, sub, result, raw)
        return result

    def _hold_segment(self, physical: int) -> MappedFile | None:
        """The CommitLog segment holding ``physical``, held (release it), or None when the
        offset was cleaned away or the segment is being deleted."""
        mf = self.commitlog.files.find(physical) if physical >= self.commitlog.min_offset else None
        return mf if mf is not None and mf.hold() else None

    def _next_segment(
        self, current: MappedFile | None, physical: int
    ) -> tuple[MappedFile | None, int, int]:
        """Release ``current`` and hold the segment holding ``physical``, with its
        ``(file_from_offset, file_end_offset)``; ``(None, 0, 0)`` when it is gone."""
        if current is not None:
            current.release()
        mf = self._hold_segment(physical)
        if mf is None:
            return None, 0, 0
        return mf, mf.file_from_offset, mf.file_end_offset

    def _collect(self, cq, queue_offset, max_count, max_bytes, sub, result, raw) -> None:  # type: ignore[no-untyped-def]
        """Read matching messages into ``result``; one segment reference per segment."""
        config = self.config
        count = (
            config.max_transfer_count_on_message_in_memory
            if max_count is None
            else max(0, min(max_count, 1 << 20))
        )
        byte_limit = (
            config.max_transfer_bytes_on_message_in_memory if max_bytes is None else max_bytes
        )
        if raw and sub.matches_all:
            self._collect_raw(cq, queue_offset, count, byte_limit, result)
            return
        check_crc = config.check_crc_on_read
        messages = result.messages
        raw_parts = result.raw
        total_bytes = scanned = missing = 0
        matches_all = sub.matches_all
        codes = sub.codes
        mf = None
        mf_from = mf_end = 0
        try:
            for physical, size, code in cq.entries(
                queue_offset, max(count, 1) if matches_all else config.max_get_scan_entries
            ):
                taken = len(raw_parts) if raw else len(messages)
                if taken >= count or (taken and total_bytes + size > byte_limit):
                    break
                scanned += 1
                if not matches_all and code not in codes:
                    continue
                if not mf_from <= physical < mf_end:
                    self.commitlog.page_cache.read_ahead(physical, physical + size)
                    mf, mf_from, mf_end = self._next_segment(mf, physical)
                    if mf is None:
                        missing += 1
                        continue
                assert mf is not None
                try:
                    record = decode_record(mf.view, physical - mf_from, check_crc=check_crc)
                except CorruptRecord as exc:
                    log.error("refusing to serve a corrupt record: %s", exc)
                    missing += 1
                    continue
                if not matches_all and not sub.matches_tag(record.tags):
                    continue
                if raw:
                    position = physical - mf_from
                    raw_parts.append(mf.view[position : position + size])
                    result.raw_count += 1
                else:
                    messages.append(record)
                total_bytes += size
        finally:
            if mf is not None:
                mf.release()
        result.next_begin_offset = queue_offset + scanned
        if messages or raw_parts:
            result.status = GetStatus.FOUND
        elif missing:
            result.status = GetStatus.OFFSET_FOUND_NULL

    def _collect_raw(
        self,
        cq,
        queue_offset: int,
        count: int,
        byte_limit: int,  # type: ignore[no-untyped-def]
        result: GetResult,
    ) -> None:
        """Every record from ``queue_offset`` as raw bytes, checked in bulk per segment.

        The consume queue decides which records are taken (:func:`_taken`);
        :func:`verified_runs` checks them, and a corrupt one is logged and left
        out, as on the per-record path.
        """
        physicals, sizes = cq.entry_columns(queue_offset, max(count, 1))
        taken = _taken(sizes, count, byte_limit)
        if taken:
            self.commitlog.page_cache.read_ahead(
                int(physicals[0]), int(physicals[taken - 1] + sizes[taken - 1])
            )
        missing = at = 0
        while at < taken:
            mf = self._hold_segment(int(physicals[at]))
            if mf is None:  # cleaned away
                missing += 1
                at += 1
                continue
            try:
                rest = physicals[at:taken]
                beyond = np.flatnonzero((rest < mf.file_from_offset) | (rest >= mf.file_end_offset))
                stop = at + (int(beyond[0]) if len(beyond) else len(rest))
                found = verified_runs(
                    mf.view,
                    physicals[at:stop] - mf.file_from_offset,
                    sizes[at:stop],
                    check_crc=self.config.check_crc_on_read,
                )
            finally:
                mf.release()
            result.raw.extend(found.views)
            result.raw_count += found.count
            for exc in found.refused:
                log.error("refusing to serve a corrupt record: %s", exc)
            missing += len(found.refused)
            at = stop
        result.next_begin_offset = queue_offset + taken
        if result.raw:
            result.status = GetStatus.FOUND
        elif missing:
            result.status = GetStatus.OFFSET_FOUND_NULL

    def look_message(self, commitlog_offset: int) -> RecordView | None:
        """The message whose record starts at ``commitlog_offset``; None if none is there."""
        self._require_running()
        try:
            return self.commitlog.read_record(
                commitlog_offset, check_crc=self.config.check_crc_on_read
            )
        except CorruptRecord:
            return None

    def view_message(self, msg_id: str) -> RecordView | None:
        """The message with this offset MessageId (no index needed); ValueError if malformed."""
        self._require_running()
        host, port, offset = parse_msg_id(msg_id)
        if (host, port) != (self.config.store_host, self.config.store_port):
            return None  # another store's message: its offset means nothing here
        return self.look_message(offset)

    def query_messages(
        self,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> list[RecordView]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY equals ``key`` in the time range."""
        self._require_running()
        end = end_ms if end_ms is not None else time.time_ns() // 1_000_000 + 1000
        found: list[RecordView] = []
        if max_count <= 0:
            return found
        for offset in self.index.query(topic, key, max_count * 4 + 16, begin_ms, end):
            record = self.look_message(offset)
            if record is None or record.topic != topic:
                continue
            if not begin_ms <= record.store_timestamp <= end:
                continue  # the index keeps whole seconds; the record has the exact time
            props = record.properties
            keys = props.get(PROPERTY_KEYS, "").split(" ")
            if key not in keys and props.get(PROPERTY_UNIQ_KEY) != key:
                continue  # a hash collision
            found.append(record)
            if len(found) >= max_count:
                break
        return found

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
        target = self._dispatch_limit() if self.config.sync_flush else self.commitlog.max_offset
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
        """Every inconsistency between CommitLog, consume queues and index (empty: sound)."""
        self._require_running()
        return verify_store(self.commitlog, self.queues, self.index, self.dispatcher.reput_offset)


def _same(results: Sequence[PutResult]) -> Sequence[PutResult]:
    return results


_COVERED_BY_REPLICA_MARK = frozenset(PutStatus) - {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT}
_FLUSH_TIMEOUT_MARK = frozenset(PutStatus) - {PutStatus.PUT_OK}


def _mark_replica_status(results: Sequence[PutResult], status: PutStatus | None) -> None:
    """Stored messages not covered by a replica get ``status`` (they stay stored)."""
    if status is not None:
        _mark(results, status, _COVERED_BY_REPLICA_MARK)


def _mark_flush_timeout(results: Sequence[PutResult]) -> None:
    _mark(results, PutStatus.FLUSH_DISK_TIMEOUT, _FLUSH_TIMEOUT_MARK)


def _mark(results: Sequence[PutResult], status: PutStatus, unless: frozenset[PutStatus]) -> None:
    """``status`` for every result whose status is not in ``unless``."""
    if isinstance(results, StoredRun):
        results.mark(status, unless)
        return
    for r in results:
        if r.status not in unless:
            r.status = status


def _taken(sizes: npt.NDArray[np.int64], count: int, byte_limit: int) -> int:
    """How many of a queue's next entries (their record ``sizes``) a raw read takes: at
    most ``count``, the first always, the others while the sizes add up to at most
    ``byte_limit``. An entry whose record is gone or refused counts too (the per-record
    path skips it and reads on; here the next pull does)."""
    if count <= 0 or not len(sizes):
        return 0
    head = np.maximum(sizes[:count], 0)  # a damaged entry's size: refused when read
    return max(1, int(np.searchsorted(np.cumsum(head), byte_limit, side="right")))
