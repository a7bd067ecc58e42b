"""Offsets by time (SearchOffset, ``PullConsumer.offset_for_time``) over two broker groups.

Two batches are sent with a time T between them; on every queue of both groups
the offset of T is the first message of the second batch (each queue is asked
of its own group's master), a time before everything answers the queue's first
offset, one after everything its end. Bad times and queues are refused, by the
SDK before anything is sent and by the broker naming the field.
"""

from __future__ import annotations

import grpc
import pytest

from boltmq import MessageQueue, Producer, PullConsumer
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.registry_client import TopicNotFound
from boltmq.pull_consumer import PullError, PullStatus
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.two_groups import (
    GROUPS,
    QUEUES,
    create_topic,
    now_ms_between_batches,
    registry_of,
    send_batch,
)
from tests.integration.two_groups import two_groups as two_groups

TOPIC = "ByTime"


def test_the_offset_of_a_time_is_the_first_message_stored_at_or_after_it(
    two_groups: LocalCluster,
) -> None:
    create_topic(two_groups, TOPIC)
    registry = registry_of(two_groups)
    with Producer(registry, "by-time-pg") as producer:
        before = send_batch(producer, TOPIC, "before", 24)
        t_ms = now_ms_between_batches()
        after = send_batch(producer, TOPIC, "after", 24)
    with PullConsumer(registry, "by-time-cg") as consumer:
        queues = consumer.queues(TOPIC)
        assert {q.broker_name for q in queues} == set(GROUPS)
        assert len(queues) == QUEUES * len(GROUPS)
        from_t: list[bytes] = []
        for queue in queues:
            everything = consumer.pull(queue, 0, max_messages=64)
            assert everything.status is PullStatus.FOUND
            first_after = next(
                (m.queue_offset for m in everything.messages if bytes(m.body) in set(after)),
                everything.max_offset,
            )
            assert consumer.offset_for_time(queue, t_ms) == first_after, queue
            assert consumer.offset_for_time(queue, 0) == 0
            far_future = t_ms + 3_600_000
            assert consumer.offset_for_time(queue, far_future) == everything.max_offset
            pulled = consumer.pull(queue, first_after, max_messages=64)
            from_t += [bytes(m.body) for m in pulled.messages]
        assert sorted(from_t) == sorted(after)
        assert not set(from_t) & set(before)


def test_bad_times_and_queues_are_refused(two_groups: LocalCluster) -> None:
    create_topic(two_groups, TOPIC)
    registry = registry_of(two_groups)
    with PullConsumer(registry, "by-time-cg") as consumer:
        queue = consumer.queues(TOPIC)[0]
        for bad in (-1, 1.5, "2024-01-01", True):
            with pytest.raises(ValueError, match="timestamp_ms must be an int >= 0"):
                consumer.offset_for_time(queue, bad)  # type: ignore[arg-type]
        with pytest.raises(PullError, match="queue_id: 9 is not a read queue") as raised:
            consumer.offset_for_time(MessageQueue(TOPIC, queue.broker_name, 9), 0)
        assert raised.value.code is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(TopicNotFound, match="NoSuchTopic"):
            consumer.offset_for_time(MessageQueue("NoSuchTopic", queue.broker_name, 0), 0)
        address = consumer.client.address_of(queue)
    channel = sync_channel(address)  # a client that skips the SDK's checks
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as negative:
            stub.SearchOffset(
                broker_pb2.SearchOffsetRequest(topic=TOPIC, queue_id=0, timestamp_ms=-5),
                timeout=5,
            )
        assert negative.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "timestamp_ms: must not be negative" in (negative.value.details() or "")
    finally:
        channel.close()
