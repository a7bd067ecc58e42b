"""The per-group retry and dead-letter topics (RocketMQ's names; docs/retry-and-delay.md).

``%RETRY%<group>`` holds a group's failed messages until they are due again:
``retry_queue_nums`` queues, READ and WRITE, created when a clustering consumer
of the group first heartbeats (so its consumers can subscribe at once) or on
the first send-back. ``%DLQ%<group>`` holds what failed ``retry_max_times``
times: one queue, WRITE only, so no consumer ever pulls it; operators list and
resend dead letters through the broker (``boltmq admin group dlq``).
"""

from __future__ import annotations

import dataclasses

from boltmq.wire import topic as names
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.errors import InvalidArgument
from services.broker.metadata.subscription_group import SubscriptionGroupConfig
from services.broker.metadata.topic_config import (
    PERM_READ_WRITE,
    PERM_WRITE,
    TopicConfig,
    TopicConfigManager,
)

DLQ_QUEUE_NUMS = 1


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``; InvalidArgument when it is no valid topic name (a bad group, or
    a group so long the topic would pass 127 characters)."""
    try:
        return names.retry_topic(group)
    except (names.InvalidGroup, names.InvalidTopic) as exc:
        raise InvalidArgument(f"group: no retry topic for {group[:60]!r}: {exc}") from None


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``; InvalidArgument like :func:`retry_topic`."""
    try:
        return names.dlq_topic(group)
    except (names.InvalidGroup, names.InvalidTopic) as exc:
        raise InvalidArgument(f"group: no dead-letter topic for {group[:60]!r}: {exc}") from None


async def ensure_retry_topic(
    topics: TopicConfigManager, publisher: TopicPublisher, group: SubscriptionGroupConfig
) -> TopicConfig:
    """The group's retry topic, created (and registered) when missing."""
    name = retry_topic(group.group_name)
    config = topics.get(name)
    if config is None:
        queues = max(1, group.retry_queue_nums)
        config = topics.upsert(TopicConfig(name, queues, queues, PERM_READ_WRITE))
        await publisher.publish()
    return config


async def resize_retry_topic(
    topics: TopicConfigManager, publisher: TopicPublisher, group: SubscriptionGroupConfig
) -> None:
    """Give an existing retry topic the group's ``retry_queue_nums`` write queues; its read
    queues never shrink, so retries already waiting in a dropped queue are still read."""
    name = retry_topic(group.group_name)
    config = topics.get(name)
    queues = max(1, group.retry_queue_nums)
    if config is None or config.write_queue_nums == queues:
        return
    read = max(config.read_queue_nums, queues)
    topics.upsert(dataclasses.replace(config, read_queue_nums=read, write_queue_nums=queues))
    await publisher.publish()


async def ensure_dlq_topic(
    topics: TopicConfigManager, publisher: TopicPublisher, group: str
) -> TopicConfig:
    """The group's dead-letter topic, created (and registered) when missing."""
    name = dlq_topic(group)
    config = topics.get(name)
    if config is None:
        config = topics.upsert(TopicConfig(name, DLQ_QUEUE_NUMS, DLQ_QUEUE_NUMS, PERM_WRITE))
        await publisher.publish()
    return config


class RetryTopics:
    """:func:`ensure_retry_topic` bound to the broker's topic table and publisher."""

    def __init__(self, topics: TopicConfigManager, publisher: TopicPublisher) -> None:
        self._topics = topics
        self._publisher = publisher

    def missing(self, group: str) -> bool:
        """True when :meth:`ensure_retry` would create the group's retry topic (a group too
        long for one, more than 120 characters, simply has none)."""
        name = names.RETRY_PREFIX + group
        return names.is_topic(name) and self._topics.get(name) is None

    async def ensure_retry(self, group: SubscriptionGroupConfig) -> None:
        """Create the group's retry topic when missing (a clustering consumer's heartbeat)."""
        if self.missing(group.group_name):
            await ensure_retry_topic(self._topics, self._publisher, group)
