"""A group's offsets on many queues in one call: UpdateConsumerOffsets and the SDK's use of it.

A PushConsumer of many topics commits its round (and its shutdown) in one call per
broker (boltmq/group_offsets.py); the broker checks every entry before it commits
any, so a bad entry commits nothing and names itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest

from boltmq import Producer, PushConsumer
from boltmq.client import ClientInstance
from boltmq.group_offsets import commit_offsets, query_offsets
from boltmq.kernel.channels import sync_channel
from boltmq.message import MessageQueue
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import Collector, bodies, send_all
from tests.integration.sdk_fixtures import consumers as consumers
from tests.integration.sdk_fixtures import producer as producer

GROUP = "cg-many"
TOPICS = [f"many-{n}" for n in range(24)]


@pytest.fixture
def stub(cluster: Cluster) -> Iterator[broker_pb2_grpc.BrokerServiceStub]:
    channel = sync_channel(cluster.broker.address)
    yield broker_pb2_grpc.BrokerServiceStub(channel)
    channel.close()


def offsets_request(*entries: tuple[str, int, int]) -> broker_pb2.UpdateConsumerOffsetsRequest:
    return broker_pb2.UpdateConsumerOffsetsRequest(
        group=GROUP,
        offsets=[broker_pb2.QueueOffset(topic=t, queue_id=q, offset=o) for t, q, o in entries],
    )


def committed(
    stub: broker_pb2_grpc.BrokerServiceStub, *queues: tuple[str, int]
) -> list[int | None]:
    answer = stub.QueryConsumerOffsets(
        broker_pb2.QueryConsumerOffsetsRequest(
            group=GROUP, queues=[broker_pb2.QueueId(topic=t, queue_id=q) for t, q in queues]
        ),
        timeout=5,
    )
    return [int(o.offset) if o.found else None for o in answer.offsets]


def refused(stub: broker_pb2_grpc.BrokerServiceStub, request: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateConsumerOffsets(request, timeout=5)
    return info.value


def test_a_push_consumer_of_many_topics_commits_every_queue_at_shutdown(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    sent = {topic: send_all(producer, topic, bodies(topic, 6)) for topic in TOPICS}
    collector = Collector()
    consumer = consumers(GROUP, dict.fromkeys(TOPICS, "*"), collector, commit_interval_ms=60_000)
    collector.wait_for({b for topic in TOPICS for b in bodies(topic, 6)})
    consumer.shutdown()  # no commit round came (60 s): shutdown commits them all
    client = ClientInstance(cluster.registry.address)
    try:
        queues = [q for topic in TOPICS for q in client.read_queues(topic)]
        found = query_offsets(client, GROUP, queues)
    finally:
        client.close()
    ends: dict[MessageQueue, int] = {}
    for results in sent.values():
        for result in results:
            ends[result.queue] = max(ends.get(result.queue, 0), result.queue_offset + 1)
    assert ends and {q: found.get(q) for q in ends} == ends


def test_the_sdk_commits_and_reads_back_many_queues(cluster: Cluster, producer: Producer) -> None:
    for topic in TOPICS[:3]:
        send_all(producer, topic, bodies(topic, 1))
    client = ClientInstance(cluster.registry.address)
    try:
        queues = [q for topic in TOPICS[:3] for q in client.read_queues(topic)]
        wanted = {q: 10 * n + 1 for n, q in enumerate(queues)}
        assert sorted(commit_offsets(client, GROUP, wanted)) == sorted(queues)
        assert query_offsets(client, GROUP, queues) == wanted
    finally:
        client.close()


def test_bad_entries_are_named_and_commit_nothing(
    cluster: Cluster, producer: Producer, stub: broker_pb2_grpc.BrokerServiceStub
) -> None:
    send_all(producer, "checked", bodies("checked", 1))
    stub.UpdateConsumerOffsets(offsets_request(("checked", 0, 5)), timeout=5)
    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    cases = [
        (offsets_request(), invalid, "offsets: must name at least one queue"),
        (offsets_request(("checked", 0, 7), ("checked", 1, -1)), invalid, "offsets[1].offset"),
        (offsets_request(("checked", 0, 7), ("checked", 0, 8)), invalid, "is offsets[0] already"),
        (offsets_request(("checked", 0, 7), ("checked", 9, 1)), invalid, "offsets[1].queue_id"),
        (offsets_request(("checked", 0, 7), ("nowhere", 0, 1)), not_found, "offsets[1].topic"),
        (offsets_request(("checked", 0, 7), ("../x", 0, 1)), invalid, "offsets[1].topic"),
        (offsets_request(*[("checked", 0, 7)] * 4097), invalid, "4097 queues; at most 4096"),
        (
            broker_pb2.UpdateConsumerOffsetsRequest(
                group="", offsets=[broker_pb2.QueueOffset(topic="checked", queue_id=0, offset=7)]
            ),
            invalid,
            "group",
        ),
    ]
    for request, code, text in cases:
        error = refused(stub, request)
        assert error.code() == code and text in str(error.details()), (text, error)
        assert committed(stub, ("checked", 0), ("checked", 1)) == [5, None], text
