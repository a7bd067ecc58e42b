"""The broker's answers to bad input and a missing store: clear, named errors.

Every malformed request of every RPC gets its status code and details naming the field;
an unreachable store is UNAVAILABLE with its address; a broker that cannot reach its store
at start exits with one clear line, not a traceback.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from boltmq.v1 import broker_pb2, registry_pb2, store_pb2
from boltmq.wire.record_batch import encode_send_record
from tests.integration.broker_fixtures import Cluster, Spawn, failure, msg, queue_pull, upsert
from tests.integration.broker_fixtures import cluster as cluster
from tests.integration.broker_fixtures import stubs as stubs


def bad_requests() -> list[tuple[str, object, grpc.StatusCode, str]]:
    """(rpc, request, code, text the details must contain)."""
    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    pull_base: dict[str, object] = dict(consumer_group="cg", topic="orders")
    return [
        ("SendMessage", broker_pb2.SendRequest(), invalid, "messages:"),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("../etc")]),
            invalid,
            "messages[0].topic",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders"), msg("other")]),
            invalid,
            "messages[1].topic",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", queue_id=0), msg("orders", queue_id=1)]),
            invalid,
            "messages[1].queue_id",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", b"")]),
            invalid,
            "messages[0].body",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", b"x" * 20_000)]),
            invalid,
            "messages[0].body",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", queue_id=4)]),
            invalid,
            "messages[0].queue_id",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(producer_group="p/g", messages=[msg("orders")]),
            invalid,
            "producer_group",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("TBW102")]),
            grpc.StatusCode.PERMISSION_DENIED,
            "system topic",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="cg", topic="nope"),
            not_found,
            "topic",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(**pull_base, queue_id=9),  # type: ignore
            invalid,
            "queue_id",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(**pull_base, queue_offset=-1),  # type: ignore
            invalid,
            "queue_offset",
        ),
        ("PullMessage", broker_pb2.BrokerPullRequest(topic="orders"), invalid, "consumer_group"),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(**pull_base, subscription="A ||"),  # type: ignore
            invalid,
            "subscription",
        ),
        ("PullQueues", broker_pb2.BrokerPullQueuesRequest(consumer_group="cg"), invalid, "pulls:"),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", n % 4, n) for n in range(1025)]
            ),
            invalid,
            "pulls:",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0), queue_pull("nope", 0)]
            ),
            not_found,
            "pulls[1].topic",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 9)]
            ),
            invalid,
            "pulls[0].queue_id",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0, -1)]
            ),
            invalid,
            "pulls[0].queue_offset",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0, subscription="A ||")]
            ),
            invalid,
            "pulls[0].subscription",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0), queue_pull("orders", 0, 5)]
            ),
            invalid,
            "pulls[1]: queue orders:0 is pulls[0] already",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", max_bytes=-1, pulls=[queue_pull("orders", 0)]
            ),
            invalid,
            "max_bytes",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(pulls=[queue_pull("orders", 0)]),
            invalid,
            "consumer_group",
        ),
        ("Heartbeat", broker_pb2.HeartbeatRequest(), invalid, "client_id"),
        (
            "Heartbeat",
            broker_pb2.HeartbeatRequest(
                client_id="c",
                consumer_groups=[broker_pb2.ConsumerGroupHeartbeat(group="g", model="SOMETIMES")],
            ),
            invalid,
            "consumer_groups[0].model",
        ),
        (
            "UpdateConsumerOffset",
            broker_pb2.UpdateConsumerOffsetRequest(group="g", topic="orders", offset=-5),
            invalid,
            "offset",
        ),
        (
            "QueryConsumerOffset",
            broker_pb2.QueryConsumerOffsetRequest(group="g", topic="nope"),
            not_found,
            "topic",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(group="g"),
            invalid,
            "queues: must name at least one queue",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g", queues=[broker_pb2.QueueId(topic="orders", queue_id=0)] * 4097
            ),
            invalid,
            "at most 4096",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                queues=[broker_pb2.QueueId(topic="orders", queue_id=0)]
            ),
            invalid,
            "group",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g",
                queues=[
                    broker_pb2.QueueId(topic="orders", queue_id=0),
                    broker_pb2.QueueId(topic="nope", queue_id=0),
                ],
            ),
            not_found,
            "queues[1].topic",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g", queues=[broker_pb2.QueueId(topic="orders", queue_id=4)]
            ),
            invalid,
            "queues[0].queue_id",
        ),
        (
            "LockQueues",
            broker_pb2.LockQueuesRequest(
                group="g", client_id="c", queues=[broker_pb2.QueueId(topic="orders", queue_id=-1)]
            ),
            invalid,
            "queues[0].queue_id",
        ),
        (
            "UpsertTopic",
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name="t", read_queue_nums=0, write_queue_nums=1, perm=6
                )
            ),
            invalid,
            "topic.read_queue_nums",
        ),
        (
            "UpsertTopic",
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name="t", read_queue_nums=1, write_queue_nums=1, perm=9
                )
            ),
            invalid,
            "topic.perm",
        ),
        (
            "UpsertTopic",
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name="TBW102", read_queue_nums=1, write_queue_nums=1, perm=6
                )
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
            "system topic",
        ),
        ("DeleteTopic", broker_pb2.DeleteTopicRequest(topic="nope"), not_found, "topic"),
        ("TopicStatus", broker_pb2.TopicStatusRequest(topic="a b"), invalid, "topic"),
        ("GroupProgress", broker_pb2.GroupProgressRequest(group="never-seen"), not_found, "group"),
        ("ViewMessage", store_pb2.GetRequest(), invalid, "by"),
        ("QueryMessageByKey", store_pb2.QueryByKeyRequest(topic="orders"), invalid, "key"),
    ]


def test_every_bad_input_gets_a_clear_error(cluster: Cluster) -> None:
    upsert(cluster.stub, "orders", queues=4)
    for rpc, request, code, text in bad_requests():
        error = failure(getattr(cluster.stub, rpc), request)
        assert error.code() == code, (rpc, request, error.details())
        assert text in str(error.details()), (rpc, error.details())


def test_an_unreachable_store_is_unavailable_with_its_address(cluster: Cluster) -> None:
    upsert(cluster.stub, "orders")
    cluster.store.kill()
    error = failure(cluster.stub.SendMessage, broker_pb2.SendRequest(messages=[msg("orders")]))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert f"store at {cluster.store.address}" in str(error.details())
    cluster.broker.kill()  # a SIGTERM would wait out its store deadline to save offsets


def test_with_its_store_gone_each_section_of_a_send_is_unavailable_with_its_address(
    cluster: Cluster,
) -> None:
    for topic in ("orders", "payments"):
        upsert(cluster.stub, topic)
    cluster.store.kill()
    request = broker_pb2.SendRequest(
        sections=[
            broker_pb2.SendSection(
                topic=topic, queue_id=-1, records=encode_send_record(topic, b"b"), record_count=1
            )
            for topic in ("orders", "payments")
        ]
    )
    answers = cluster.stub.SendMessage(request, timeout=60).sections
    assert len(answers) == 2
    for answer in answers:
        assert answer.code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert f"store at {cluster.store.address}" in answer.error
    cluster.broker.kill()  # a SIGTERM would wait out its store deadline to save offsets


def test_a_broker_without_its_store_exits_with_one_clear_line(spawn: Spawn, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as info:
        spawn(
            "broker",
            "store_address=127.0.0.1:1",
            "registry_addresses=",
            "store_connect_timeout_ms=300",
        )
    log = str(info.value)
    assert "broker cannot load its metadata" in log and "127.0.0.1:1" in log
    assert "Traceback" not in log
