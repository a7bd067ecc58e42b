"""Offsets by time and group offset resets: SearchOffset and ResetOffset.

SearchOffset answers the first offset of one queue stored at or after a time
(the store's binary search over the queue's store timestamps; a time after the
last message answers the queue's max offset, one before the first its min
offset). Any account that may consume the topic may ask (SUB on the topic).

ResetOffset (admin only) sets a group's committed offset of every read queue of
a topic on this broker, to the offset of a time, to the earliest or to the
latest (RocketMQ's resetOffsetByTime and skipAccumulatedMessage), on the
group's master; the CLI calls every master. The committed offsets are saved at
once, and each queue's reset is remembered until the group's consumers pull
from it (:mod:`services.broker.metadata.offset_reset`): live consumers are moved
on their next pull, without a restart, and the pulls parked on those queues are
woken so that "next pull" is now, not after the long poll.
"""

from __future__ import annotations

from boltmq.v1 import broker_pb2
from services.broker.arrivals.long_poll import LongPollHub
from services.broker.errors import FailedPrecondition, InvalidArgument, NotFound
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.names import check_group, check_topic
from services.broker.metadata.offset_reset import OffsetResets
from services.broker.metadata.persister import MetadataPersister
from services.broker.metadata.topic_config import TopicConfigManager
from services.broker.pull.read_check import check_read_queue, readable_topic
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole


class OffsetAdmin:
    """SearchOffset and ResetOffset over the store, the offsets and the pending resets."""

    def __init__(
        self,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        resets: OffsetResets,
        store: StoreClient,
        hub: LongPollHub,
        role: StoreRole,
        persister: MetadataPersister,
    ) -> None:
        self._topics = topics
        self._offsets = offsets
        self._resets = resets
        self._store = store
        self._hub = hub
        self._role = role
        self._persister = persister

    async def search_offset(self, request: broker_pb2.SearchOffsetRequest) -> int:
        """The first offset of the queue stored at or after the request's time."""
        config = readable_topic(self._topics, "topic", request.topic)
        check_read_queue(config, "queue_id", request.queue_id)
        if request.timestamp_ms < 0:
            raise InvalidArgument(
                f"timestamp_ms: must not be negative (epoch ms), got {request.timestamp_ms}"
            )
        return await self._store.offset_by_time(
            request.topic, request.queue_id, request.timestamp_ms
        )

    async def reset_offset(
        self, request: broker_pb2.ResetOffsetRequest
    ) -> list[broker_pb2.QueueReset]:
        """Commit the group's new offset of every read queue of the topic, and have its
        live consumers moved there on their next pull."""
        if not self._role.is_master:
            raise FailedPrecondition(
                "this broker's store is a replica: reset offsets on the group's master"
            )
        group = check_group("group", request.group)
        topic = check_topic("topic", request.topic)
        config = self._topics.get(topic)
        if config is None:
            raise NotFound(f"topic: topic {topic!r} does not exist")
        which = request.WhichOneof("to")
        if which is None or (which != "timestamp_ms" and not getattr(request, which)):
            raise InvalidArgument("to: set timestamp_ms, earliest or latest")
        if which == "timestamp_ms" and request.timestamp_ms < 0:
            raise InvalidArgument(
                f"timestamp_ms: must not be negative (epoch ms), got {request.timestamp_ms}"
            )
        ranges = {q.queue_id: q for q in await self._store.list_queues(topic)}
        resets = []
        for queue_id in range(config.read_queue_nums):
            stored = ranges.get(queue_id)
            if which == "timestamp_ms":
                offset = await self._store.offset_by_time(topic, queue_id, request.timestamp_ms)
            elif which == "earliest":
                offset = stored.min_offset if stored else 0
            else:
                offset = stored.max_offset if stored else 0
            old = self._offsets.query(group, topic, queue_id)
            self._offsets.commit(group, topic, queue_id, offset)
            self._resets.reset(group, topic, queue_id, offset)
            resets.append(
                broker_pb2.QueueReset(
                    queue_id=queue_id, old_offset=-1 if old is None else old, new_offset=offset
                )
            )
        await self._persister.save_offsets()
        for queue_id in range(config.read_queue_nums):
            self._hub.wake(topic, queue_id)
        return resets
