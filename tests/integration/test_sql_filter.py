"""SQL92 property filters end to end, on two broker groups: the brokers keep only the
matching messages for a consumer that subscribes by SQL, tag subscriptions are unchanged,
and bad expressions are refused by SDK, broker and CLI with the error's position."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from boltmq import (
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    PushConsumerOptions,
    SendStatus,
)
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from boltmq.wire.sql_filter import InvalidFilter
from tests.integration.sdk_fixtures import FAST, Collector
from tests.integration.test_cli import run_cli
from tests.integration.two_groups import create_topic, registry_of
from tests.integration.two_groups import two_groups as two_groups
from tests.waiting import wait_until

TOPIC = "SqlOrders"
CONDITION = "a > 5 AND region IN ('eu','us') AND b IS NOT NULL"


def order(n: int) -> Message:
    """Message n: a = n, region cycling eu/us/asia, b on even ones, tag even/odd."""
    properties = {"a": str(n), "region": ("eu", "us", "asia")[n % 3]}
    if n % 2 == 0:
        properties["b"] = "yes"
    return Message(
        topic=TOPIC, body=f"o-{n:02d}".encode(), tags="even" if n % 2 == 0 else "odd",
        properties=properties,
    )  # fmt: skip


def matching(numbers: range) -> set[bytes]:
    return {f"o-{n:02d}".encode() for n in numbers if n > 5 and n % 3 != 2 and n % 2 == 0}


@pytest.fixture(scope="module")
def topic(two_groups: LocalCluster) -> Iterator[str]:
    create_topic(two_groups, TOPIC)
    yield TOPIC


def consumer(
    cluster: LocalCluster, group: str, selection: str | MessageSelector, got: Collector
) -> PushConsumer:
    return PushConsumer(
        registry_of(cluster),
        group,
        {TOPIC: selection},
        got,
        options=PushConsumerOptions(**FAST),
    ).start()


def test_a_sql_consumer_gets_only_matching_messages_from_both_groups(
    two_groups: LocalCluster, topic: str
) -> None:
    by_sql, by_tag = Collector(), Collector()
    sql_consumer = consumer(two_groups, "cg-sql", MessageSelector.by_sql(CONDITION), by_sql)
    tag_consumer = consumer(two_groups, "cg-tag", "even", by_tag)
    try:
        with Producer(registry_of(two_groups), "pg-sql") as producer:
            # sent while both consumers are parked in long polls: arrivals wake them
            results = [producer.send(order(n)) for n in range(40)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
        expected = matching(range(40))
        by_sql.wait_for(expected, "the SQL consumer's messages")
        evens = {f"o-{n:02d}".encode() for n in range(0, 40, 2)}
        by_tag.wait_for(evens, "the tag consumer's messages")
        # nothing more arrives: the broker filtered the rest out (the tag consumer, which
        # saw every even message, shows both groups have been read past the last one)
        assert sorted(by_sql.bodies()) == sorted(expected)
        assert sorted(by_tag.bodies()) == sorted(evens)
        assert all(int(g.properties["a"]) > 5 for g in by_sql.got)
    finally:
        sql_consumer.shutdown()
        tag_consumer.shutdown()


def test_pull_answers_no_match_past_filtered_messages_and_matches_later(
    two_groups: LocalCluster, topic: str
) -> None:
    selector = MessageSelector.by_sql("a BETWEEN 100 AND 199 OR region = 'mars'")
    with PullConsumer(registry_of(two_groups), "cg-sql-pull") as puller:
        queues = puller.queues(TOPIC)
        assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
        ends = {}
        for queue in queues:
            result = puller.pull(queue, 0, max_messages=32, subscription=selector)
            # every message of the first test fails: none comes back, the offset moves on
            assert result.messages == []
            assert result.status in (PullStatus.NO_MATCHED_MSG, PullStatus.NO_NEW_MSG)
            ends[queue] = result.next_begin_offset
        assert sum(ends.values()) >= 40
        with Producer(registry_of(two_groups), "pg-sql") as producer:
            for _ in range(8):  # round-robin over the four queues of both groups
                mars = Message(topic=TOPIC, body=b"mars", properties={"region": "mars", "a": "1"})
                assert producer.send(mars).status is SendStatus.SEND_OK
        got: list[bytes] = []

        def pulled_all() -> bool:
            for queue in queues:
                result = puller.pull(queue, ends[queue], subscription=selector)
                got.extend(bytes(m.body) for m in result.messages)
                ends[queue] = result.next_begin_offset
            return len(got) >= 8

        wait_until(pulled_all, "the eight matching messages")
        assert got == [b"mars"] * 8
    # a pull answered with decoded messages (raw_records off) is filtered alike
    found = []
    for queue in queues:
        broker = two_groups.groups[queue.broker_name][0].broker
        assert broker is not None
        channel = sync_channel(broker.address)
        try:
            answer = broker_pb2_grpc.BrokerServiceStub(channel).PullMessage(
                broker_pb2.BrokerPullRequest(
                    consumer_group="cg-sql-pull", topic=TOPIC, queue_id=queue.queue_id,
                    max_messages=1_000, subscription="region = 'mars' AND a = 1",
                    expression_type="SQL92",
                ),
                timeout=5,
            )  # fmt: skip
        finally:
            channel.close()
        found += [m.body for m in answer.messages]
        assert answer.next_begin_offset == ends[queue]
    assert found == [b"mars"] * 8


def test_bad_expressions_are_refused_by_the_sdk_and_the_broker(
    two_groups: LocalCluster, topic: str
) -> None:
    with pytest.raises(InvalidFilter, match="line 1, column 10: unexpected 'AND'"):
        MessageSelector.by_sql("a > 5 OR AND b = 1")
    broker = two_groups.groups["broker-b"][0].broker
    assert broker is not None
    channel = sync_channel(broker.address)
    stub = broker_pb2_grpc.BrokerServiceStub(channel)
    try:
        bad_sql = broker_pb2.ConsumerSubscription(
            topic=TOPIC, expression="a > 'x'", expression_type="SQL92"
        )
        bad_type = broker_pb2.ConsumerSubscription(
            topic=TOPIC, expression="a > 1", expression_type="XPATH"
        )
        for subscription, says in (
            (bad_sql, "expression: invalid SQL92 filter at line 1, column 5"),
            (bad_type, "expression_type: expression type 'XPATH' is not one of TAG, SQL92"),
        ):
            beat = broker_pb2.HeartbeatRequest(
                client_id="sql-bad",
                consumer_groups=[
                    broker_pb2.ConsumerGroupHeartbeat(group="cg-bad", subscriptions=[subscription])
                ],
            )
            with pytest.raises(grpc.RpcError) as refused:
                stub.Heartbeat(beat, timeout=5)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert says in (refused.value.details() or "")
        pull = broker_pb2.BrokerPullRequest(
            consumer_group="cg-bad",
            topic=TOPIC,
            queue_id=0,
            subscription="(a = 1",
            expression_type="SQL92",
        )
        with pytest.raises(grpc.RpcError) as refused:
            stub.PullMessage(pull, timeout=5)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "subscription: invalid SQL92 filter at line 1, column 7" in (
            refused.value.details() or ""
        )
        queues = broker_pb2.BrokerPullQueuesRequest(
            consumer_group="cg-bad",
            pulls=[
                broker_pb2.QueuePull(topic=TOPIC, queue_id=0, subscription="*"),
                broker_pb2.QueuePull(
                    topic=TOPIC, queue_id=1, subscription="a IN (TRUE)", expression_type="SQL92"
                ),
            ],
        )
        with pytest.raises(grpc.RpcError) as refused:
            stub.PullQueues(queues, timeout=5)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "pulls[1].subscription: invalid SQL92 filter at line 1, column 7" in (
            refused.value.details() or ""
        )
        for call, request, says in (
            (
                stub.PullMessage,
                broker_pb2.BrokerPullRequest(
                    consumer_group="cg-bad", topic=TOPIC, subscription="*", expression_type="sql"
                ),
                "expression_type: expression type 'sql' is not one of TAG, SQL92",
            ),
            (
                stub.PullQueues,
                broker_pb2.BrokerPullQueuesRequest(
                    consumer_group="cg-bad",
                    pulls=[broker_pb2.QueuePull(topic=TOPIC, expression_type="TAGS")],
                ),
                "pulls[0].expression_type: expression type 'TAGS' is not one of",
            ),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call(request, timeout=5)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert says in (refused.value.details() or ""), refused.value.details()
    finally:
        channel.close()


def test_the_cli_consumes_by_sql_and_refuses_a_bad_condition(
    two_groups: LocalCluster, topic: str
) -> None:
    registry = registry_of(two_groups)
    bad = run_cli("consume", "--topic", TOPIC, "--sql", "a >", "--registry", registry)
    assert bad.returncode == 1
    assert "invalid SQL92 filter at line 1, column 4: the expression ends too early" in bad.stderr
    with Producer(registry, "pg-sql") as producer:
        for _ in range(3):
            venus = Message(topic=TOPIC, body=b"venus", properties={"region": "venus"})
            assert producer.send(venus).status is SendStatus.SEND_OK
    good = run_cli(
        "consume", "--topic", TOPIC, "--group", "cg-sql-cli", "--sql", "region = 'venus'",
        "--count", "3", "--registry", registry,
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert good.stdout.count("body=b'venus'") == 3
    assert good.stdout.count("body=") == 3
