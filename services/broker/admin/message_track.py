"""TrackMessage: what became of one message for every consumer group of its topic.

RocketMQ's message track (``mqadmin queryMsgById`` / ``messageTrackDetail``), answered
by the broker that stores the message (``boltmq admin message track ID``). The groups
tracked are those that committed an offset on the topic at this broker and those with
live consumers subscribing it. For each, in this order:

1. ``DEAD_LETTERED``: a copy with the message's unique id (``UNIQ_KEY``) is in
   ``%DLQ%<group>``;
2. ``RETRYING``: the group sent it back and a retry copy waits for its delay in the
   schedule topic (``REAL_TOPIC`` = ``%RETRY%<group>``: more scheduled copies than
   delivered ones), or the last copy delivered to ``%RETRY%<group>`` is past the
   group's offset there;
3. ``CONSUMED``: its last retry copy is below the group's offset in the retry topic,
   or, never sent back, the message is below the group's offset on its queue
   (``CONSUMED_BUT_FILTERED`` when the group's live subscription, tag or SQL92,
   leaves it out: the offset passed it without delivering it);
4. ``NOT_CONSUMED_YET`` otherwise (no offset yet, or one not past the message).

Copies are found through the store's index of unique ids (the same lookup as
``QueryMessageByKey``), on this broker: a consumer sends a message back to the broker
it pulled it from, so its retry and dead-letter copies are stored beside it. A message
without a unique id (sent on the raw path without one) is tracked by offsets only.
Offsets are the committed ones: what a consumer has taken but not yet committed
(within its ``commit_interval_ms``) still reads as not consumed.
"""

from __future__ import annotations

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.record import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    parse_msg_id,
)
from boltmq.wire.sql_filter import SQL92, InvalidFilter, parse_filter
from boltmq.wire.topic import DLQ_PREFIX, RETRY_PREFIX, InvalidSubscription, parse_subscription
from services.broker.clients.client_manager import ClientManager
from services.broker.errors import InvalidArgument, NotFound
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.store.store_client import StoreClient

COPIES_MAX = 64
"""Copies of one message asked of the index per topic (16 retries at most, by default)."""


class MessageTracker:
    """Answers TrackMessage from the store's index and the broker's offsets and clients."""

    def __init__(
        self, store: StoreClient, offsets: ConsumerOffsetManager, clients: ClientManager
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._clients = clients

    async def track(
        self, request: broker_pb2.TrackMessageRequest
    ) -> broker_pb2.TrackMessageResponse:
        try:
            parse_msg_id(request.msg_id)
        except ValueError as exc:
            raise InvalidArgument(f"msg_id: not an offset message id: {exc}") from None
        found = await self._store.get(store_pb2.GetRequest(msg_id=request.msg_id))
        if not found.found or found.message.msg_id != request.msg_id.upper():
            raise NotFound(f"msg_id: no message {request.msg_id} on this broker")
        message = found.message
        if message.topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) or message.topic == SCHEDULE_TOPIC:
            raise InvalidArgument(
                f"msg_id: {request.msg_id} is a copy in {message.topic}; track the original"
            )
        unique_id = message.properties.get(PROPERTY_UNIQ_KEY, "")
        tracks = [
            await self._track_group(group, message, unique_id)
            for group in sorted(self._groups_of(message.topic))
        ]
        return broker_pb2.TrackMessageResponse(message=message, tracks=tracks)

    def _groups_of(self, topic: str) -> set[str]:
        groups = {group for (name, group), _ in self._offsets.snapshot() if name == topic}
        for group in self._clients.consumer_groups():
            view = self._clients.consumer_group(group)
            if view is not None and any(s[0] == topic for s in view.subscriptions):
                groups.add(group)
        return groups

    async def _track_group(
        self, group: str, message: message_pb2.MessageExt, unique_id: str
    ) -> broker_pb2.MessageTrack:
        def answer(state: broker_pb2.TrackState.ValueType, detail: str) -> broker_pb2.MessageTrack:
            return broker_pb2.MessageTrack(group=group, state=state, detail=detail)

        retry = RETRY_PREFIX + group
        if unique_id:
            dead = await self._copies(DLQ_PREFIX + group, unique_id)
            if dead:
                return answer(broker_pb2.DEAD_LETTERED, f"in {DLQ_PREFIX + group}")
            scheduled = [
                m
                for m in await self._copies(SCHEDULE_TOPIC, unique_id)
                if m.properties.get(PROPERTY_REAL_TOPIC) == retry
            ]
            retried = await self._copies(retry, unique_id)
            if len(scheduled) > len(retried):
                return answer(
                    broker_pb2.RETRYING,
                    f"sent back {len(scheduled)} times, retry {len(scheduled)} waits for its delay",
                )
            if retried:
                last = max(retried, key=lambda m: (m.store_timestamp_ms, m.queue_offset))
                done = self._offsets.query(group, retry, last.queue_id)
                if done is not None and done > last.queue_offset:
                    return answer(
                        broker_pb2.CONSUMED, f"consumed from {retry} after {len(retried)} retries"
                    )
                return answer(
                    broker_pb2.RETRYING,
                    f"retry {len(retried)} in {retry}/{last.queue_id}@{last.queue_offset}, "
                    "not consumed yet",
                )
        committed = self._offsets.query(group, message.topic, message.queue_id)
        where = f"{message.topic}/{message.queue_id}"
        if committed is None:
            return answer(broker_pb2.NOT_CONSUMED_YET, f"no offset committed on {where}")
        if committed <= message.queue_offset:
            return answer(
                broker_pb2.NOT_CONSUMED_YET,
                f"offset {committed} on {where}, the message is at {message.queue_offset}",
            )
        if not self._subscribed(group, message):
            return answer(
                broker_pb2.CONSUMED_BUT_FILTERED,
                f"offset {committed} on {where} passed it; the subscription filters it out",
            )
        return answer(broker_pb2.CONSUMED, f"offset {committed} on {where}")

    def _subscribed(self, group: str, message: message_pb2.MessageExt) -> bool:
        """Whether the group's live subscription of the topic takes the message (True
        when it has no live consumer: nothing says otherwise)."""
        view = self._clients.consumer_group(group)
        for topic, expression, kind in view.subscriptions if view is not None else ():
            if topic != message.topic:
                continue
            try:
                if kind == SQL92:
                    properties = {PROPERTY_TAGS: message.tags, **message.properties}
                    return parse_filter(expression).matches(properties)
                return parse_subscription(expression).matches_tag(message.tags or None)
            except (InvalidFilter, InvalidSubscription):
                return True
        return True

    async def _copies(self, topic: str, unique_id: str) -> list[message_pb2.MessageExt]:
        """The messages of ``topic`` whose unique id is ``unique_id`` (the index holds a
        hash: another key may share it)."""
        try:
            answer = await self._store.query_by_key(
                store_pb2.QueryByKeyRequest(topic=topic, key=unique_id, max_count=COPIES_MAX)
            )
        except NotFound:  # the store never had the topic
            return []
        return [m for m in answer.messages if m.properties.get(PROPERTY_UNIQ_KEY) == unique_id]
