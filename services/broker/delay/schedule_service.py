"""The broker-side scheduler: due delay messages go to their real topic.

One task per delay level reads that level's ``SCHEDULE_TOPIC_XXXX`` queue in
order from its offset in :class:`DelayOffsetManager`. Entries of one level are
due in the order they were stored (same delay, growing store time), so the task
sleeps until its head entry is due, appends the entry's next copy (the real
message, or the next hop of a ``deliver_at_ms``; :mod:`delay_message`) and only
once the store acknowledged it moves the level's offset. An empty queue parks
the task in the long-poll hub until the store reports an arrival on it. Only
the master's broker delivers; a replica's broker keeps its copy of the
progress and starts from it when promoted.

Exactly once across crashes. Progress is saved every
``offset_persist_interval_ms``, so after a crash (or a promotion, or a store
call whose outcome is unknown) the first entries past the saved offset may
already have been delivered. A level is therefore in *checking* mode at start,
on becoming master and after any append that failed without a clear "nothing
stored": before appending an entry the task asks the store's index for copies
of the entry's ``UNIQ_KEY`` in the target topic and skips the entry when one
carries its ``SCHEDULE_SOURCE``. Deliveries of one level are strictly
sequential, so the first entry without a copy ends checking mode: nothing
after it can have been delivered. The check waits until the store has
dispatched everything it holds, so an index entry is never missed because it
was still in flight. (Rejected: saving progress after every delivery — one
fsync'd file write per message, and still a window between append and save.)
"""

from __future__ import annotations

import asyncio
import logging
import time

from boltmq.kernel import runtime
from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record import PROPERTY_UNIQ_KEY, SCHEDULE_TOPIC
from services.broker.arrivals.long_poll import LongPollHub
from services.broker.delay.delay_level import DelayLevels
from services.broker.delay.delay_message import (
    PROPERTY_SCHEDULE_SOURCE,
    due_ms,
    next_copy,
    source_of,
)
from services.broker.errors import BrokerError, InvalidArgument
from services.broker.metadata.delay_offset import DelayOffsetManager
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole
from services.broker.wire import STORED

log = logging.getLogger(__name__)

PULL_BATCH_MESSAGES = 32
"""Entries one read of a level queue returns at most."""
IDLE_WAIT_S = 5.0
"""Longest park on an empty level queue before reading it again (a missed wake-up's bound)."""
SLEEP_MAX_S = 1.0
"""Longest single sleep towards a due time, so a demotion or shutdown is noticed."""
RETRY_PAUSE_S = 0.5
"""Pause after a failed store call before the same entry is tried again."""
DUPLICATE_QUERY_MAX = 64
"""Copies of one UNIQ_KEY looked at by the duplicate check."""
DISPATCH_WAIT_MAX_S = 10.0
"""Longest wait for the store to index what it holds before a duplicate check."""
_REFUSED_FOR_GOOD = frozenset((message_pb2.MESSAGE_ILLEGAL, message_pb2.PROPERTIES_SIZE_EXCEEDED))
"""Statuses no retry can change: the entry is logged and skipped."""


class ScheduleService:
    """Delivers due delay messages, one task per level."""

    def __init__(
        self,
        levels: DelayLevels,
        store: StoreClient,
        offsets: DelayOffsetManager,
        hub: LongPollHub,
        role: StoreRole,
    ) -> None:
        self._levels = levels
        self._store = store
        self._offsets = offsets
        self._hub = hub
        self._role = role
        self._checking = dict.fromkeys(range(1, levels.count + 1), True)
        self._tasks: list[asyncio.Task[None]] = []
        self.delivered = 0
        """Copies appended (real messages and hops), for tests and stats."""
        self.skipped_duplicates = 0
        """Entries found already delivered by the duplicate check."""

    def start(self) -> None:
        """One task per level, in the background."""
        self._tasks = [
            asyncio.create_task(self._run(level), name=f"schedule-level-{level}")
            for level in range(1, self._levels.count + 1)
        ]

    async def stop(self) -> None:
        """Cancel every level's task (progress is saved by the persister)."""
        tasks, self._tasks = self._tasks, []
        await runtime.cancel_and_wait(*tasks)

    async def _run(self, level: int) -> None:
        was_master = True
        while True:
            if not self._role.is_master:
                was_master = False
                await asyncio.sleep(SLEEP_MAX_S)
                continue
            if not was_master:  # promoted: progress is the master's last copy (MetadataSync)
                was_master = True
                self._checking[level] = True
            stepped = False
            # Without this loop the level's delayed messages would never be delivered.
            with runtime.one_round(f"delay level {level}", log):
                try:
                    await self._step(level)
                    stepped = True
                except BrokerError as exc:
                    log.warning("delay level %d: %s (will retry)", level, exc)
            if not stepped:
                await asyncio.sleep(RETRY_PAUSE_S)

    async def _step(self, level: int) -> None:
        """Read the level's queue once and deliver what is due, or wait."""
        queue_id = level - 1
        offset = self._offsets.get(level)
        token = self._hub.token(SCHEDULE_TOPIC, queue_id)
        response = await self._store.pull(
            store_pb2.PullRequest(
                topic=SCHEDULE_TOPIC,
                queue_id=queue_id,
                queue_offset=offset,
                max_messages=PULL_BATCH_MESSAGES,
            )
        )
        if response.status == message_pb2.FOUND:
            for entry in response.messages:
                if not await self._wait_due(entry):
                    return
                await self._deliver(level, entry)
                self._offsets.advance(level, entry.queue_offset + 1)
            if not response.messages:
                self._offsets.advance(level, response.next_begin_offset)
            return
        if response.next_begin_offset != offset and response.status in (
            message_pb2.OFFSET_TOO_SMALL,
            message_pb2.OFFSET_OVERFLOW_BADLY,
        ):
            log.warning(
                "delay level %d: offset %d is outside the queue; continuing at %d",
                level,
                offset,
                response.next_begin_offset,
            )
            self._offsets.advance(level, response.next_begin_offset)
            return
        await self._hub.wait(SCHEDULE_TOPIC, queue_id, offset, token, IDLE_WAIT_S, counted=False)

    async def _wait_due(self, entry: message_pb2.MessageExt) -> bool:
        """Sleep until ``entry`` is due; False when the broker stopped being the master."""
        while True:
            left_s = (due_ms(entry) - time.time_ns() // 1_000_000) / 1000
            if left_s <= 0:
                return True
            await asyncio.sleep(min(left_s, SLEEP_MAX_S))
            if not self._role.is_master:
                return False

    async def _deliver(self, level: int, entry: message_pb2.MessageExt) -> None:
        """Append the entry's next copy, unless checking finds it was appended already."""
        try:
            copy = next_copy(entry, self._levels, time.time_ns() // 1_000_000)
        except ValueError as exc:
            log.error(
                "delay level %d: entry %d is not a delay message (%s); skipped",
                level,
                entry.queue_offset,
                exc,
            )
            return
        if self._checking[level]:
            if await self._already_delivered(copy, entry):
                self.skipped_duplicates += 1
                log.info(
                    "delay level %d: entry %d was delivered before a restart; skipped",
                    level,
                    entry.queue_offset,
                )
                return
            self._checking[level] = False
        self._checking[level] = True  # until the store says how the append ended
        try:
            response = await self._store.append([copy], entry.born_host)
        except InvalidArgument as exc:
            self._checking[level] = False
            log.error(
                "delay level %d: entry %d refused by the store (%s); skipped",
                level,
                entry.queue_offset,
                exc,
            )
            return
        status = response.statuses[0] if response.statuses else message_pb2.UNKNOWN_ERROR
        if status in STORED:
            self._checking[level] = False
            self.delivered += 1
            return
        if status in _REFUSED_FOR_GOOD:
            self._checking[level] = False
            log.error(
                "delay level %d: entry %d refused by the store (%s: %s); skipped",
                level,
                entry.queue_offset,
                message_pb2.PutMessageStatus.Name(status),
                response.errors.get(0, ""),
            )
            return
        raise BrokerError(
            f"entry {entry.queue_offset} not delivered: {message_pb2.PutMessageStatus.Name(status)}"
        )

    async def _already_delivered(
        self, copy: message_pb2.Message, entry: message_pb2.MessageExt
    ) -> bool:
        """Whether the target topic holds a copy made from ``entry`` (the index by UNIQ_KEY)."""
        key = entry.properties.get(PROPERTY_UNIQ_KEY)
        if not key:
            return False
        await self._wait_dispatched()
        found = await self._store.query_by_key(
            store_pb2.QueryByKeyRequest(
                topic=copy.topic,
                key=key,
                max_count=DUPLICATE_QUERY_MAX,
                begin_ms=entry.store_timestamp_ms,
            )
        )
        source = source_of(entry)
        return any(m.properties.get(PROPERTY_SCHEDULE_SOURCE) == source for m in found.messages)

    async def _wait_dispatched(self) -> None:
        deadline = time.monotonic() + DISPATCH_WAIT_MAX_S
        while True:
            info = await self._store.store_info()
            if info.dispatched_offset >= info.commitlog_max_offset:
                return
            if time.monotonic() > deadline:
                raise BrokerError("the store has not indexed everything it holds yet")
            await asyncio.sleep(0.05)
