"""The checks a read passes: the topic exists and may be read, the queue is one of its
read queues, a call names a bounded number of queues.

Pulls and consumer-offset calls (commits, queries) share them, so a queue a
consumer may not pull is one it may not commit on either. Each raises naming
the request field (NOT_FOUND for an unknown topic, PERMISSION_DENIED for a
topic without READ, INVALID_ARGUMENT otherwise).
"""

from __future__ import annotations

from services.broker.errors import InvalidArgument, NotFound, PermissionDenied
from services.broker.metadata.names import check_topic
from services.broker.metadata.topic_config import TopicConfig, TopicConfigManager


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
        raise InvalidArgument(
            f"{field}: {queue_id} is not a read queue of topic "
            f"{config.name!r} (0..{config.read_queue_nums - 1})"
        )
    return queue_id


def check_queue_count(field: str, count: int, limit: int) -> None:
    """A call naming ``count`` queues in ``field``: at least one, at most ``limit``."""
    if not count:
        raise InvalidArgument(f"{field}: must name at least one queue")
    if count > limit:
        raise InvalidArgument(f"{field}: {count} queues; at most {limit} a call")
