"""PullMessage: check topic, queue and group, commit the piggybacked offset, read, long-poll.

The store does the reading and the tag filtering; the broker adds what only
it knows (perm bits, groups, offsets) and long polling: when the store says
the queue holds nothing at or after the offset (OFFSET_OVERFLOW_ONE,
NO_MESSAGE_IN_QUEUE, or a queue not yet written) and the client allows a
suspend, the pull is parked in the :class:`LongPollHub` until an arrival
passes its offset or the suspend (capped at ``long_poll_max_ms``) runs out.
A timed-out pull is answered with the store's empty response, so the client
sees the same status it would have seen at once.
"""

from __future__ import annotations

import time

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from services.broker.config import BrokerConfig
from services.broker.consumer_offset import ConsumerOffsetManager
from services.broker.errors import InvalidArgument, NotFound, PermissionDenied
from services.broker.group_access import GroupAccess
from services.broker.long_poll import LongPollHub
from services.broker.names import check_subscription, check_topic
from services.broker.store_client import StoreClient
from services.broker.store_role import StoreRole
from services.broker.topic_config import TopicConfig, TopicConfigManager
from services.store.pull_wire import PullAnswer

PARKABLE = frozenset((message_pb2.OFFSET_OVERFLOW_ONE, message_pb2.NO_MESSAGE_IN_QUEUE))
"""Store answers meaning "nothing yet at this offset": the pull may wait for an arrival."""


def parkable(status: int, queue_offset: int) -> bool:
    """Whether a pull answered with ``status`` may wait for an arrival.

    A queue nobody has written yet does not exist in the store
    (NO_MATCHED_LOGIC_QUEUE); a pull from its start waits like one on an empty
    queue, as RocketMQ answers both with PULL_NOT_FOUND and suspends.
    """
    return status in PARKABLE or (status == message_pb2.NO_MATCHED_LOGIC_QUEUE
                                  and queue_offset == 0)


def readable_topic(topics: TopicConfigManager, field: str, topic: str) -> TopicConfig:
    """The topic's config when it exists and may be read; raise naming ``field``."""
    check_topic(field, topic)
    config = topics.get(topic)
    if config is None:
        raise NotFound(f"{field}: topic {topic!r} does not exist")
    if not config.readable:
        raise PermissionDenied(f"{field}: topic {topic!r} is not readable (perm {config.perm})")
    return config


def check_read_queue(config: TopicConfig, field: str, queue_id: int) -> int:
    """``queue_id`` when it is one of the topic's read queues; raise naming ``field``."""
    if not 0 <= queue_id < config.read_queue_nums:
        raise InvalidArgument(f"{field}: {queue_id} is not a read queue of topic "
                              f"{config.name!r} (0..{config.read_queue_nums - 1})")
    return queue_id


REPLICA_SUGGESTED = 1
"""suggest_broker_id for "any replica": the SDK picks the group's lowest replica id."""


class PullProcessor:
    """Serves pulls, parking the empty ones."""

    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, groups: GroupAccess,
                 offsets: ConsumerOffsetManager, store: StoreClient, hub: LongPollHub,
                 role: StoreRole) -> None:
        self._config = config
        self._role = role
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._store = store
        self._hub = hub

    async def pull(self, request: broker_pb2.BrokerPullRequest) -> PullAnswer:
        """Answer a pull, parking it while the queue has nothing new.

        The answer keeps the store's encoding, forwarded to the client as it is.
        """
        config = readable_topic(self._topics, "topic", request.topic)
        check_read_queue(config, "queue_id", request.queue_id)
        _check_numbers(request)
        check_subscription("subscription", request.subscription)
        await self._groups.require_consumable("consumer_group", request.consumer_group)
        if request.HasField("commit_offset") and request.commit_offset >= 0:
            self._offsets.commit(request.consumer_group, request.topic, request.queue_id,
                                 request.commit_offset)
        store_request = store_pb2.PullRequest(
            topic=request.topic, queue_id=request.queue_id, queue_offset=request.queue_offset,
            max_messages=request.max_messages, max_bytes=request.max_bytes,
            subscription=request.subscription, raw_records=request.raw_records)
        suspend_ms = min(request.suspend_timeout_ms, self._config.long_poll_max_ms)
        answer = await self._pull_or_park(store_request, suspend_ms)
        if self._far_behind(answer.response):
            answer.suggest(REPLICA_SUGGESTED)
        return answer

    def _far_behind(self, response: store_pb2.PullResponse) -> bool:
        """A master's consumer past the lag threshold, when replicas may serve reads."""
        config = self._config
        return config.slave_read_enable and self._role.is_master and \
            response.max_offset - response.next_begin_offset > \
            config.suggest_pulling_from_slave_lag_messages

    async def _pull_or_park(self, request: store_pb2.PullRequest, suspend_ms: int
                            ) -> PullAnswer:
        # Each pass is caused by an event (first call, an arrival, a stream
        # reconnect), never by a timer; the deadline only bounds the whole wait.
        deadline = time.monotonic() + suspend_ms / 1000
        while True:
            token = self._hub.token(request.topic, request.queue_id)
            answer = await self._store.pull_answer(request)
            if suspend_ms <= 0 or not parkable(answer.response.status, request.queue_offset):
                return answer
            woken = await self._hub.wait(request.topic, request.queue_id,
                                         request.queue_offset, token,
                                         deadline - time.monotonic())
            if not woken:
                return answer


def _check_numbers(request: broker_pb2.BrokerPullRequest) -> None:
    for field in ("queue_offset", "max_messages", "max_bytes", "suspend_timeout_ms"):
        value = getattr(request, field)
        if value < 0:
            raise InvalidArgument(f"{field}: must not be negative, got {value}")
