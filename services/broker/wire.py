"""Conversions between the broker's domain values and their proto messages.

Kept in one place so the servicer and the registrar speak the same wire form.
"""

from __future__ import annotations

from boltmq.v1 import broker_pb2, registry_pb2
from services.broker.queue_lock import QueueKey
from services.broker.topic_config import TopicConfig


def topic_to_proto(config: TopicConfig) -> registry_pb2.TopicConfig:
    """The wire form of a topic's configuration."""
    return registry_pb2.TopicConfig(
        name=config.name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        order=config.order,
    )


def queues_to_proto(queues: list[QueueKey]) -> list[broker_pb2.QueueId]:
    """Wire form of ``(topic, queue_id)`` pairs."""
    return [broker_pb2.QueueId(topic=topic, queue_id=queue_id) for topic, queue_id in queues]
