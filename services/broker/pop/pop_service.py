"""PopService: POP consumption (receive, ack, change invisibility, dead-letter) in the broker.

The in-broker API (stable; BrokerService's ReceiveMessages / AckMessage /
ChangeInvisibleDuration call it, and so may any other gRPC edge of the broker)::

    pop = broker.pop
    popped = await pop.receive(group, topic, tag_filter_expression, max_messages,
                               invisible_ms, wait_ms, fifo=False)   # list[PoppedMessage]
    await pop.ack(group, topic, receipt_handle)
    new_handle = await pop.change_invisible(group, topic, receipt_handle, invisible_ms)
    await pop.forward_to_dead_letter(group, topic, receipt_handle)
    pop.max_attempts(group)   # deliveries before the dead-letter queue

A :class:`PoppedMessage` is ``message`` (the store's MessageExt, as the pull path returns
it: the stored body, compressed when ``sys_flag`` says so), ``receipt_handle`` (str),
``delivery_attempt`` (1 on the first delivery) and ``invisible_until_ms``.

Errors (all :class:`~boltmq.kernel.errors.ServiceError`): InvalidArgument naming the
argument (a bad name, expression, batch size or duration), NotFound (unknown topic, or
group with auto-creation off), PermissionDenied (topic not readable, group not allowed to
consume), FailedPrecondition (this broker's store is a replica: POP changes state, only a
master serves it), :class:`~services.broker.errors.ReceiptHandleInvalid` (INVALID_ARGUMENT:
malformed, forged, or for another group / topic / broker) and
:class:`~services.broker.errors.ReceiptHandleStale` (FAILED_PRECONDITION: the delivery is
over: acked, dead-lettered, changed, or received again after its invisible time).

The model (state: :mod:`services.broker.metadata.pop_state`; handles:
:mod:`services.broker.pop.receipt_handle`):

- ``receive`` goes over the topic's read queues (starting one further each call) and
  takes, per queue, first the messages whose invisible time ran out (oldest first: each
  is delivered again with ``delivery_attempt + 1``, or, when it was delivered
  ``max_attempts`` times already, appended to ``%DLQ%<group>``
  (:func:`services.broker.retry.dead_letter.bury`) and forgotten), then new messages from
  the group's ``pop_offset``, tag-filtered by the store as pulls are. Each delivered
  message is invisible for ``invisible_ms``. When nothing is deliverable the call waits
  (at most ``wait_ms``, capped by ``long_poll_max_ms``) for an arrival on the topic's
  queues (the long-poll hub), an ack or change of the group, or the next invisible time
  to run out, and looks again.
- ``max_attempts`` is the group's ``retry_max_times + 1`` (RocketMQ's rule).
- FIFO (the group's ``consume_message_orderly``, or ``fifo`` asked by the caller):
  messages of one message group (the ``__SHARDINGKEY`` property, RocketMQ's; producers
  send a message group's messages to one queue) are delivered in queue order and one at a
  time: the next only after the one before was acked or dead-lettered; messages without
  one are not ordered. Messages read past a busy message group are held (attempt 0).
- A queue holds at most ``IN_FLIGHT_MAX`` in-flight messages per group; past that a
  receive reads nothing new from it until some are acked.
- State changes are synchronous (one event loop), so two receives never deliver one
  message; new messages of a queue are read under a per-queue lock. A pass does not ask
  the store about a queue it last answered "nothing past this offset" while the store
  watches it and nothing arrived (the hub's token and ``watching``), as PullQueues does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Final

from boltmq.v1 import message_pb2, store_pb2
from services.broker.arrivals.long_poll import ArrivalToken, LongPollHub
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.config import BrokerConfig
from services.broker.errors import (
    BrokerError,
    FailedPrecondition,
    InvalidArgument,
    ReceiptHandleStale,
)
from services.broker.metadata.clock import Clock, wall_clock_ms
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.group_access import GroupAccess
from services.broker.metadata.names import check_group, check_subscription, check_topic
from services.broker.metadata.pop_state import InFlight, PopQueue, PopState, new_token
from services.broker.metadata.subscription_group import SubscriptionGroupConfig
from services.broker.metadata.topic_config import TopicConfigManager
from services.broker.pop import receipt_handle
from services.broker.pop.pop_wakeups import GroupTopic, PopWakeups
from services.broker.pull.pull_processor import parkable
from services.broker.pull.read_check import readable_topic
from services.broker.retry.dead_letter import bury
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole

log = logging.getLogger(__name__)

RECEIVE_MAX_MESSAGES: Final = 32
"""Messages one receive returns at most."""
INVISIBLE_MIN_MS: Final = 100
INVISIBLE_MAX_MS: Final = 12 * 3600 * 1000
"""Invisible durations accepted: 100 ms .. 12 h."""
WAIT_MAX_MS: Final = 300_000
"""Longest wait a receive may ask for (the broker waits at most ``long_poll_max_ms``)."""
IN_FLIGHT_MAX: Final = 1024
"""In-flight (received, not acked) messages of one group per queue at most."""
FIFO_READ_AHEAD: Final = 32
"""New messages a FIFO receive reads at least, to find message groups that are not busy."""
BURY_RETRY_MS: Final = 10_000
"""A message being dead-lettered is invisible this long; if the store failed, it comes
back then."""
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
"""The FIFO message group of a message (RocketMQ's property)."""
_READ_STATUSES = frozenset(
    (message_pb2.FOUND, message_pb2.NO_MATCHED_MESSAGE, message_pb2.OFFSET_FOUND_NULL)
)
_MOVED_STATUSES = frozenset((message_pb2.OFFSET_TOO_SMALL, message_pb2.OFFSET_OVERFLOW_BADLY))


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One delivery of a message by POP."""

    message: message_pb2.MessageExt
    receipt_handle: str
    delivery_attempt: int
    """1 on the first delivery."""
    invisible_until_ms: int
    """When the message becomes visible again unless acked (ms since the epoch)."""


@dataclass(frozen=True, slots=True)
class _Claim:
    """A record as it was when a receive claimed it (the record may change meanwhile)."""

    queue_id: int
    queue_offset: int
    commitlog_offset: int
    attempt: int
    token: int
    visible_at_ms: int


class PopService:
    """POP consumption: see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: GroupAccess,
        offsets: ConsumerOffsetManager,
        state: PopState,
        store: StoreClient,
        hub: LongPollHub,
        role: StoreRole,
        publisher: TopicPublisher,
        clock_ms: Clock = wall_clock_ms,
    ) -> None:
        self._config = config
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._state = state
        self._store = store
        self._hub = hub
        self._role = role
        self._publisher = publisher
        self._clock_ms = clock_ms
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._next_queue: dict[GroupTopic, int] = {}
        self._idle: dict[tuple[str, int], tuple[int, ArrivalToken]] = {}
        """A queue the store last said holds nothing past an offset, with the hub's token
        taken before it was asked: while the token holds and the store watches the queue
        (a waiting receive named it), a pass need not ask again."""
        self._wakeups = PopWakeups(hub)

    def secret_document(self) -> bytes:
        """popSecret.json (for GetMetadata, which seals it for the brokers' own account)."""
        return self._state.secret_json()

    def max_attempts(self, group: str) -> int:
        """Deliveries of one message before it goes to the group's dead-letter queue."""
        config = self._groups.settings(group) or SubscriptionGroupConfig(group)
        return config.retry_max_times + 1

    async def receive(
        self,
        group: str,
        topic: str,
        tag_filter_expression: str,
        max_messages: int,
        invisible_ms: int,
        wait_ms: int,
        fifo: bool = False,
    ) -> list[PoppedMessage]:
        """Up to ``max_messages`` messages, each invisible for ``invisible_ms``; waits up to
        ``wait_ms`` while none is deliverable (module docstring)."""
        config = readable_topic(self._topics, "topic", topic)
        check_subscription("tag_filter_expression", tag_filter_expression)
        _check_range("max_messages", max_messages, 1, RECEIVE_MAX_MESSAGES)
        _check_range("invisible_ms", invisible_ms, INVISIBLE_MIN_MS, INVISIBLE_MAX_MS)
        _check_range("wait_ms", wait_ms, 0, WAIT_MAX_MS)
        group_config = await self._groups.require_consumable("group", group)
        self._require_master()
        fifo = fifo or group_config.consume_message_orderly
        max_attempts = group_config.retry_max_times + 1
        deadline = time.monotonic() + min(wait_ms, self._config.long_poll_max_ms) / 1000
        key = (group, topic)
        while True:
            start = self._next_queue.get(key, 0) % max(config.read_queue_nums, 1)
            self._next_queue[key] = start + 1
            queue_ids = [
                (start + n) % config.read_queue_nums for n in range(config.read_queue_nums)
            ]
            tokens = self._hub.tokens([(topic, q, 0) for q in queue_ids])  # before any read
            generation = self._wakeups.generation(key)
            popped: list[PoppedMessage] = []
            taken: list[_Claim] = []
            try:
                for queue_id in queue_ids:
                    popped += await self._pop_queue(
                        group,
                        topic,
                        queue_id,
                        tag_filter_expression or "*",
                        max_messages - len(popped),
                        invisible_ms,
                        max_attempts,
                        fifo,
                        taken,
                    )
                    if len(popped) >= max_messages:
                        break
            except BaseException:  # cancelled, or the store failed: nothing is delivered
                self._release(group, topic, taken)
                raise
            remaining = deadline - time.monotonic()
            if popped or remaining <= 0 or self._wakeups.closed:
                return popped
            if generation != self._wakeups.generation(key):
                continue  # an ack, change or burial during the pass: look again
            next_visible_s = self._next_visible_ms(group, topic, queue_ids) / 1000
            await self._wakeups.wait(
                key,
                self._arrival_waits(group, topic, queue_ids, tokens),
                min(remaining, next_visible_s),
            )
            self._groups.check_consumable("group", group)
            self._require_master()

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """The delivery is done: the message is never delivered to the group again."""
        handle, state = self._current(group, topic, receipt_handle)
        del state.in_flight[handle.queue_offset]
        self._changed(group, topic)

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Make the delivery invisible for ``invisible_ms`` from now; returns its new handle
        (the old one is stale from here on)."""
        _check_range("invisible_ms", invisible_ms, INVISIBLE_MIN_MS, INVISIBLE_MAX_MS)
        handle, state = self._current(group, topic, receipt_handle)
        record = state.in_flight[handle.queue_offset]
        record.token = new_token()
        record.visible_at_ms = self._clock_ms() + invisible_ms
        self._changed(group, topic)
        return self._handle(group, topic, _claim(handle.queue_id, handle.queue_offset, record))

    async def forward_to_dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        """Give up on the delivery: the message goes to ``%DLQ%<group>`` now."""
        handle, state = self._current(group, topic, receipt_handle)
        record = state.in_flight[handle.queue_offset]
        claim = self._claim_for_burial(handle.queue_id, handle.queue_offset, record)
        self._state.changed()
        await self._bury(group, topic, claim)

    # -- receive, one queue at a time ------------------------------------------------------

    async def _pop_queue(
        self,
        group: str,
        topic: str,
        queue_id: int,
        expression: str,
        budget: int,
        invisible_ms: int,
        max_attempts: int,
        fifo: bool,
        taken: list[_Claim],
    ) -> list[PoppedMessage]:
        """Claim and fetch up to ``budget`` messages of one queue (each claim also goes to
        ``taken``), and bury those past their last attempt."""
        state = self._state.queue(group, topic, queue_id)
        claims, burials = self._select(state, queue_id, budget, invisible_ms, max_attempts, fifo)
        taken += claims
        read: dict[int, message_pb2.MessageExt] = {}
        room = IN_FLIGHT_MAX - len(state.in_flight)
        if len(claims) < budget and room > 0:
            lock = self._locks.setdefault((group, topic, queue_id), asyncio.Lock())
            async with lock:
                want = budget - len(claims)
                count = min(room, max(want, FIFO_READ_AHEAD) if fifo else want)
                read = await self._read_new(state, group, topic, queue_id, expression, count)
                more, buried = self._select(state, queue_id, want, invisible_ms, max_attempts, fifo)
                taken += more
                claims += more
                burials += buried
        if claims or burials:
            self._state.changed()
        popped = []
        for claim in claims:
            message = read.get(claim.queue_offset) or await self._fetch(topic, claim)
            if message is None:  # cleaned from the store meanwhile: nothing to deliver
                self._forget(state, claim)
                continue
            handle = self._handle(group, topic, claim)
            popped.append(PoppedMessage(message, handle, claim.attempt, claim.visible_at_ms))
        for claim in burials:
            try:
                await self._bury(group, topic, claim)
            except BrokerError as exc:  # the receive still answers what it took
                log.warning(
                    "cannot dead-letter %s:%d:%d of group %s (again in %d ms): %s",
                    topic,
                    claim.queue_id,
                    claim.queue_offset,
                    group,
                    BURY_RETRY_MS,
                    exc,
                )
        return popped

    def _select(
        self,
        state: PopQueue,
        queue_id: int,
        budget: int,
        invisible_ms: int,
        max_attempts: int,
        fifo: bool,
    ) -> tuple[list[_Claim], list[_Claim]]:
        """Claim the queue's deliverable records (up to ``budget``) and those to bury;
        synchronous, so no other receive can claim them too."""
        now = self._clock_ms()
        busy: set[str] = set()
        claims: list[_Claim] = []
        burials: list[_Claim] = []
        for offset in sorted(state.in_flight):
            record = state.in_flight[offset]
            message_group = record.message_group if fifo else ""
            if message_group in busy:
                continue
            if message_group:
                busy.add(message_group)
            if record.visible_at_ms > now:
                continue
            if record.attempt >= max_attempts:
                burials.append(self._claim_for_burial(queue_id, offset, record))
            elif len(claims) < budget:
                record.attempt += 1
                record.token = new_token()
                record.visible_at_ms = now + invisible_ms
                claims.append(_claim(queue_id, offset, record))
            elif not fifo:
                break
        return claims, burials

    async def _read_new(
        self,
        state: PopQueue,
        group: str,
        topic: str,
        queue_id: int,
        expression: str,
        count: int,
    ) -> dict[int, message_pb2.MessageExt]:
        """Read up to ``count`` new messages from ``pop_offset`` into held records
        (attempt 0); the messages by queue offset."""
        offset = state.pop_offset
        if offset is None:
            offset = self._offsets.query(group, topic, queue_id) or 0
        token = self._hub.token(topic, queue_id)
        if self._idle.get((topic, queue_id)) == (offset, token) and self._hub.watching(
            topic, queue_id, offset
        ):
            return {}  # the store said "nothing past offset", and nothing arrived since
        for _ in range(2):  # below the queue's min: once more from the min
            response = await self._store.pull(
                store_pb2.PullRequest(
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=offset,
                    max_messages=count,
                    subscription=expression,
                )
            )
            if response.status not in _MOVED_STATUSES or response.next_begin_offset == offset:
                break
            offset = state.pop_offset = response.next_begin_offset
            self._state.changed()
        if state.pop_offset is None:  # where the group starts: waits name this offset
            state.pop_offset = offset
            self._state.changed()
        if parkable(response.status, offset):
            self._idle[(topic, queue_id)] = (offset, token)
        if response.status not in _READ_STATUSES:
            return {}
        read = {}
        for message in response.messages:
            read[message.queue_offset] = message
            state.in_flight.setdefault(
                message.queue_offset,
                InFlight(
                    message.commitlog_offset,
                    message_group=message.properties.get(PROPERTY_SHARDING_KEY, ""),
                ),
            )
        if response.next_begin_offset > offset:
            state.pop_offset = response.next_begin_offset
            self._state.changed()
        return read

    async def _fetch(self, topic: str, claim: _Claim) -> message_pb2.MessageExt | None:
        """The claimed message from the store; None when it is not there any more (cleaned,
        or the topic was deleted and made again)."""
        found = await self._store.get(store_pb2.GetRequest(commitlog_offset=claim.commitlog_offset))
        message = found.message
        if not found.found or (message.topic, message.queue_id, message.queue_offset) != (
            topic,
            claim.queue_id,
            claim.queue_offset,
        ):
            return None
        return message

    def _claim_for_burial(self, queue_id: int, offset: int, record: InFlight) -> _Claim:
        """Claim a record on its way to the dead-letter queue: its handles go stale, and it
        stays invisible while it is buried (back after BURY_RETRY_MS if that failed)."""
        record.token = new_token()
        record.visible_at_ms = self._clock_ms() + BURY_RETRY_MS
        return _claim(queue_id, offset, record)

    async def _bury(self, group: str, topic: str, claim: _Claim) -> None:
        state = self._state.queue(group, topic, claim.queue_id)
        message = await self._fetch(topic, claim)
        if message is not None:
            await bury(
                self._topics,
                self._publisher,
                self._store,
                group,
                message,
                max(claim.attempt - 1, 0),
            )
        self._forget(state, claim)
        self._changed(group, topic)

    def _release(self, group: str, topic: str, claims: list[_Claim]) -> None:
        """Undo claims a receive could not answer: visible again at once, not counted as
        a delivery (unless the record changed since)."""
        for claim in claims:
            state = self._state.find(group, topic, claim.queue_id)
            record = state.in_flight.get(claim.queue_offset) if state is not None else None
            if record is not None and record.token == claim.token:
                record.token = new_token()
                record.visible_at_ms = 0
                record.attempt = max(record.attempt - 1, 0)
        if claims:
            self._changed(group, topic)

    def _forget(self, state: PopQueue, claim: _Claim) -> None:
        """Drop the claimed record, unless it changed since (then it is someone else's)."""
        record = state.in_flight.get(claim.queue_offset)
        if record is not None and record.token == claim.token:
            del state.in_flight[claim.queue_offset]
            self._state.changed()

    # -- waiting ---------------------------------------------------------------------------

    def _arrival_waits(
        self, group: str, topic: str, queue_ids: list[int], tokens: list[ArrivalToken]
    ) -> list[tuple[str, int, int, ArrivalToken]]:
        """What to wait for on each queue after a pass found nothing: an arrival past its
        POP offset as the pass left it (``tokens``, taken before the pass, catch arrivals
        during it). A queue at IN_FLIGHT_MAX reads nothing new, so an arrival there wakes
        nobody (an ack does); without this a queue with unread messages past its offset
        would wake its receives again and again."""
        waits = []
        for queue_id, token in zip(queue_ids, tokens, strict=True):
            state = self._state.queue(group, topic, queue_id)
            if len(state.in_flight) < IN_FLIGHT_MAX:
                waits.append((topic, queue_id, state.pop_offset or 0, token))
        return waits

    def _next_visible_ms(self, group: str, topic: str, queue_ids: list[int]) -> float:
        """Milliseconds until the first delivered message of the group becomes visible
        again (infinity when none will)."""
        soonest = min(
            (
                record.visible_at_ms
                for queue_id in queue_ids
                if (state := self._state.find(group, topic, queue_id)) is not None
                for record in state.in_flight.values()
                if record.attempt
            ),
            default=None,
        )
        return float("inf") if soonest is None else max(soonest - self._clock_ms(), 0) + 1

    def _changed(self, group: str, topic: str) -> None:
        """The group's state changed: persist it, and let waiting receives look again."""
        self._state.changed()
        self._wakeups.changed((group, topic))

    # -- handles ---------------------------------------------------------------------------

    def _handle(self, group: str, topic: str, claim: _Claim) -> str:
        return receipt_handle.encode(
            self._state.secret,
            self._config.broker_name,
            group,
            topic,
            receipt_handle.ReceiptHandle(
                claim.queue_id,
                claim.queue_offset,
                claim.commitlog_offset,
                claim.token,
                claim.visible_at_ms,
            ),
        )

    def _current(
        self, group: str, topic: str, text: str
    ) -> tuple[receipt_handle.ReceiptHandle, PopQueue]:
        """The handle and its queue's state when the delivery it names is still on;
        ReceiptHandleInvalid / ReceiptHandleStale otherwise."""
        check_group("group", group)
        check_topic("topic", topic)
        self._require_master()
        handle = receipt_handle.decode(
            self._state.secret, self._config.broker_name, group, topic, text, "receipt_handle"
        )
        state = self._state.find(group, topic, handle.queue_id)
        record = state.in_flight.get(handle.queue_offset) if state is not None else None
        if state is None or record is None or record.commitlog_offset != handle.commitlog_offset:
            raise ReceiptHandleStale(
                f"receipt_handle: the message at {topic}:{handle.queue_id}:"
                f"{handle.queue_offset} was acked or dead-lettered already"
            )
        if record.token != handle.token:
            raise ReceiptHandleStale(
                f"receipt_handle: stale: the message at {topic}:{handle.queue_id}:"
                f"{handle.queue_offset} was received again or its invisible time was "
                f"changed since (a newer handle holds it)"
            )
        return handle, state

    def _require_master(self) -> None:
        if not self._role.is_master:
            raise FailedPrecondition(
                "this broker's store is a replica: POP consumption is served by the master"
            )


def _claim(queue_id: int, offset: int, record: InFlight) -> _Claim:
    return _Claim(
        queue_id,
        offset,
        record.commitlog_offset,
        record.attempt,
        record.token,
        record.visible_at_ms,
    )


def _check_range(field: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidArgument(f"{field}: must be {low}..{high}, got {value}")
