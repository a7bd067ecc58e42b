"""MessageReader: the store's read algorithm, from a consume queue to the CommitLog.

A pull (:meth:`MessageReader.get_messages`) reads consume-queue entries from
a queue offset, skips those whose tag code the subscription does not want,
and reads each remaining record from the CommitLog segment that holds it,
holding one segment reference at a time so the cleaner cannot unmap it under
the read. The outcome is a :class:`~services.store.status.GetStatus` value,
never an exception (RocketMQ's ``getMessage``):

====================  ===================================================
When                  Status, ``next_begin_offset``
====================  ===================================================
queue never written   NO_MATCHED_LOGIC_QUEUE, 0
queue empty           NO_MESSAGE_IN_QUEUE, 0
bad subscription      NO_MATCHED_MESSAGE, the offset asked
below min_offset      OFFSET_TOO_SMALL, min_offset
== max_offset         OFFSET_OVERFLOW_ONE, the offset asked
past max_offset       OFFSET_OVERFLOW_BADLY, min_offset when it is 0, else max_offset
within the queue      FOUND (or NO_MATCHED_MESSAGE, or OFFSET_FOUND_NULL when the
                      records were cleaned away or refused as corrupt), past the
                      entries scanned
====================  ===================================================

A pull whose first record lies behind the CommitLog's page-cache window (more
than ``commitlog_page_cache_window_bytes`` behind its end: a cold read, its
pages come from disk) returns at most ``max_transfer_count_on_message_in_disk``
messages and ``max_transfer_bytes_on_message_in_disk`` bytes (one message
always fits), RocketMQ's limits on a read "in disk": a consumer far behind
moves on in small steps and cannot hold the store for long at a time
(docs/store-reads.md); a pull of a PullQueues call may take its even share of
the call's bytes instead when that is more (``cold_bytes``). ``result.cold``
says the limits applied.

A raw read of everything (``raw=True`` with a subscription that matches all)
takes the bulk path: the entries as two columns, every record of a segment
checked at once (:func:`boltmq.wire.record_heads.verified_runs`).

The reader also answers a lookup by CommitLog offset or message id and a
query by key through the index. Each public read first checks the store is
running (``require_running``, given by the facade).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from boltmq.wire.pulled_records import verified_runs
from boltmq.wire.record import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    CorruptRecord,
    RecordView,
    decode_record,
    parse_msg_id,
)
from boltmq.wire.record_heads import SMALL_BATCH
from boltmq.wire.topic import InvalidSubscription, Subscription, parse_subscription
from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueue, ConsumeQueueTable
from services.store.index_service import IndexService
from services.store.mapped_file import MappedFile
from services.store.status import GetResult, GetStatus

log = logging.getLogger(__name__)

MAX_COUNT_CEILING = 1 << 20
"""A pull's ``max_count`` is lowered to this (the service asks far fewer)."""


class MessageReader:
    """Reads of a store's messages: pulls by queue offset, lookups, queries by key."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        index: IndexService,
        require_running: Callable[[], None],
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self._require_running = require_running

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
        what a server passing records on needs. ``cold_bytes``: the bytes a cold read
        may return when that is more than ``max_transfer_bytes_on_message_in_disk`` (a
        PullQueues call's share of its budget, docs/store-reads.md).
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
            self._collect(cq, queue_offset, max_count, max_bytes, sub, result, raw, cold_bytes)
        return result

    def is_cold(self, physical: int) -> bool:
        """Whether a record at CommitLog offset ``physical`` lies behind the page-cache
        window (its pages were released: a read of it comes from disk). Nothing is cold
        when the window is off."""
        window = self.config.commitlog_page_cache_window_bytes
        return window > 0 and physical < self.commitlog.max_offset - window

    def starts_cold(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether a pull from ``queue_offset`` is a cold read: the record of its entry
        lies behind the window (False when the queue has no such entry)."""
        if self.config.commitlog_page_cache_window_bytes <= 0:
            return False
        cq = self.queues.get(topic, queue_id)
        entry = cq.entry(queue_offset) if cq is not None else None
        return entry is not None and self.is_cold(entry[0])

    def _limits(self, cold: bool, count: int, byte_limit: int, cold_bytes: int) -> tuple[int, int]:
        """A pull's ``(count, byte_limit)``, lowered to the cold limits for a cold read (its
        bytes to the larger of ``max_transfer_bytes_on_message_in_disk`` and ``cold_bytes``)."""
        if not cold:
            return count, byte_limit
        config = self.config
        return (
            min(count, config.max_transfer_count_on_message_in_disk),
            min(byte_limit, max(config.max_transfer_bytes_on_message_in_disk, cold_bytes)),
        )

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

    def _collect(
        self,
        cq: ConsumeQueue,
        queue_offset: int,
        max_count: int | None,
        max_bytes: int | None,
        sub: Subscription,
        result: GetResult,
        raw: bool,
        cold_bytes: int,
    ) -> None:
        """Read matching messages into ``result``; one segment reference per segment."""
        config = self.config
        count = (
            config.max_transfer_count_on_message_in_memory
            if max_count is None
            else max(0, min(max_count, MAX_COUNT_CEILING))
        )
        byte_limit = (
            config.max_transfer_bytes_on_message_in_memory if max_bytes is None else max_bytes
        )
        if raw and sub.matches_all:
            self._collect_raw(cq, queue_offset, count, byte_limit, result, cold_bytes)
            return
        cold: bool | None = None  # decided at the first record read
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
                if cold is None:
                    cold = result.cold = self.is_cold(physical)
                    count, byte_limit = self._limits(cold, count, byte_limit, cold_bytes)
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
        cq: ConsumeQueue,
        queue_offset: int,
        count: int,
        byte_limit: int,
        result: GetResult,
        cold_bytes: int,
    ) -> None:
        """Every record from ``queue_offset`` as raw bytes, checked in bulk per segment.

        The consume queue decides which records are taken (:func:`_taken`);
        :func:`verified_runs` checks them, and a corrupt one is logged and left
        out, as on the per-record path.
        """
        physicals, sizes = cq.entry_columns(queue_offset, max(count, 1))
        if len(physicals):
            result.cold = self.is_cold(int(physicals[0]))
            count, byte_limit = self._limits(result.cold, count, byte_limit, cold_bytes)
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
                stop = at + _within(physicals[at:taken], mf.file_from_offset, mf.file_end_offset)
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


def _taken(sizes: npt.NDArray[np.int64], count: int, byte_limit: int) -> int:
    """How many of a queue's next entries (their record ``sizes``) a raw read takes: at
    most ``count``, the first always, the others while the sizes add up to at most
    ``byte_limit``. An entry whose record is gone or refused counts too (the per-record
    path skips it and reads on; here the next pull does)."""
    if count <= 0 or not len(sizes):
        return 0
    if min(count, len(sizes)) < SMALL_BATCH:  # a loop costs less than the arrays here
        taken = total = 0
        for size in sizes[:count].tolist():
            total += max(size, 0)
            if taken and total > byte_limit:
                break
            taken += 1
        return taken
    head = np.maximum(sizes[:count], 0)  # a damaged entry's size: refused when read
    return max(1, int(np.searchsorted(np.cumsum(head), byte_limit, side="right")))


def _within(physicals: npt.NDArray[np.int64], begin: int, end: int) -> int:
    """How many of ``physicals`` from the first lie in ``[begin, end)`` (one segment)."""
    if len(physicals) < SMALL_BATCH:
        inside = 0
        for physical in physicals.tolist():
            if not begin <= physical < end:
                break
            inside += 1
        return inside
    beyond = np.flatnonzero((physicals < begin) | (physicals >= end))
    return int(beyond[0]) if len(beyond) else len(physicals)
