"""The official RocketMQ 5 Python SimpleConsumer, unmodified, on BoltMQ's POP consumption.

One cluster serves the module; the official producer sends, the official consumer
receives, acks, changes invisible durations, and lets messages run out of attempts.
Group settings (orderly, retry_max_times) are made with BoltMQ's own admin call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import Cluster
from tests.integration.rocketmq.official_client import (
    consumptions,
    needs_node_client,
    needs_official_client,
    of,
    run_client,
    run_node,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(Path(tmp_path_factory.mktemp("rmq-consumer")))
    yield started
    started.stop()


def broker(cluster: Cluster) -> broker_pb2_grpc.BrokerServiceStub:
    return broker_pb2_grpc.BrokerServiceStub(sync_channel(cluster.broker.address))


def produce(cluster: Cluster, *args: str) -> list[dict[str, object]]:
    return of(run_client("rmq_producer.py", cluster.broker.address, *args), "sent")


def consume(cluster: Cluster, mode: str, group: str, topic: str, *args: str) -> list[dict]:
    return run_client("rmq_consumer.py", cluster.broker.address, mode, group, topic, *args)


@needs_official_client
def test_received_messages_carry_what_was_sent_and_acked_ones_never_come_back(
    cluster: Cluster,
) -> None:
    sent = produce(cluster, "send", "RmqConsume", "5")
    events = consume(cluster, "drain", "rmq-consume", "RmqConsume", "5", "30")
    received = of(events, "received")
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
    assert sorted(r["body"] for r in received) == [f"sync-{i}" for i in range(5)]
    for message in received:
        assert message["attempt"] == 1
        assert message["tag"] == "t" and message["keys"] == ["k1"]
        assert message["properties"] == {"origin": "rmq-python"}
        assert message["topic"] == "RmqConsume"
    again = consume(cluster, "drain", "rmq-consume", "RmqConsume", "1", "3")
    assert of(again, "received") == [] and of(again, "error") == []


@needs_official_client
def test_an_unacked_message_comes_back_with_its_attempt_count_and_a_stale_ack_is_refused(
    cluster: Cluster,
) -> None:
    (sent,) = produce(cluster, "send", "RmqRedeliver", "1")
    events = consume(cluster, "redeliver", "rmq-redeliver", "RmqRedeliver")
    received = of(events, "received")
    assert [r["attempt"] for r in received] == [1, 2, 3]
    assert {r["message_id"] for r in received} == {sent["message_id"]}
    assert of(events, "changed") and of(events, "acked")
    (stale,) = of(events, "stale_ack_refused")
    assert stale["message"].startswith("40013")  # INVALID_RECEIPT_HANDLE
    after = consume(cluster, "drain", "rmq-redeliver", "RmqRedeliver", "1", "3")
    assert of(after, "received") == []


@needs_official_client
def test_a_message_goes_to_the_dead_letter_queue_after_the_groups_max_attempts(
    cluster: Cluster,
) -> None:
    broker(cluster).UpsertGroup(
        broker_pb2.UpsertGroupRequest(group="rmq-dlq", retry_max_times=1), timeout=10
    )
    (sent,) = produce(cluster, "send", "RmqDeadLetter", "1")
    events = consume(cluster, "abandon", "rmq-dlq", "RmqDeadLetter", "6")
    assert [r["attempt"] for r in of(events, "received")] == [1, 2]  # retry_max_times + 1
    dead = broker(cluster).ListDeadLetters(
        broker_pb2.ListDeadLettersRequest(group="rmq-dlq"), timeout=10
    )
    assert [m.properties["UNIQ_KEY"] for m in dead.messages] == [sent["message_id"]]
    assert [m.body for m in dead.messages] == [b"sync-0"]


@needs_official_client
def test_fifo_messages_are_consumed_in_send_order_per_message_group(cluster: Cluster) -> None:
    broker(cluster).UpsertGroup(
        broker_pb2.UpsertGroupRequest(group="rmq-fifo", consume_message_orderly=True), timeout=10
    )
    sent = produce(cluster, "fifo", "RmqFifoConsume", "3", "12")
    events = consume(cluster, "drain", "rmq-fifo", "RmqFifoConsume", "12", "40")
    received = of(events, "received")
    assert len(received) == len(sent) == 12
    for group in ("g0", "g1", "g2"):
        bodies = [r["body"] for r in received if r["group"] == group]
        assert bodies == [f"{group}-{i}" for i in range(12) if f"g{i % 3}" == group]


@needs_official_client
def test_a_push_consumer_gets_a_failed_message_again_and_acks_it_on_success(
    cluster: Cluster,
) -> None:
    sent = produce(cluster, "send", "RmqPush", "3")
    events = run_client(
        "rmq_push_consumer.py", cluster.broker.address, "rmq-push", "RmqPush", "3", "40"
    )
    consumed = of(events, "consumed")
    for message in sent:
        mine = consumptions(consumed, message["message_id"])
        assert mine == [(1, "FAILURE"), (2, "SUCCESS")]
    assert of(events, "done") == [{"event": "done", "succeeded": 3}]
    after = consume(cluster, "drain", "rmq-push", "RmqPush", "1", "3")
    assert of(after, "received") == []  # the push consumer acked every success


@needs_official_client
def test_a_fifo_push_consumer_consumes_each_message_group_in_order_one_at_a_time(
    cluster: Cluster,
) -> None:
    broker(cluster).UpsertGroup(
        broker_pb2.UpsertGroupRequest(group="rmq-push-fifo", consume_message_orderly=True),
        timeout=10,
    )
    sent = produce(cluster, "fifo", "RmqPushFifo", "2", "16")
    events = run_client(
        "rmq_push_consumer.py",
        cluster.broker.address,
        "rmq-push-fifo",
        "RmqPushFifo",
        "16",
        "40",
        "fifo",
    )
    consumed = of(events, "consumed")
    assert sorted(c["message_id"] for c in consumed) == sorted(s["message_id"] for s in sent)
    for group in ("g0", "g1"):
        mine = [c for c in consumed if c["group"] == group]
        assert [c["body"] for c in mine] == [f"{group}-{i}" for i in range(int(group[1]), 16, 2)]
        assert {c["in_flight"] for c in mine} == {1}  # never two of one group at once
    assert {c["attempt"] for c in consumed} == {1}
    after = consume(cluster, "drain", "rmq-push-fifo", "RmqPushFifo", "1", "3")
    assert of(after, "received") == []  # every consumed message was acked


@needs_node_client
def test_the_official_nodejs_client_sends_receives_and_acks(cluster: Cluster) -> None:
    events = run_node("send_and_receive.js", cluster.broker.address, "RmqNode", "rmq-node", "3")
    sent, received = of(events, "sent"), of(events, "received")
    assert len(sent) == 3 and of(events, "done") == [{"event": "done", "received": 3}]
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
    assert sorted(r["body"] for r in received) == ["node-0", "node-1", "node-2"]
    assert {(r["tag"], r["attempt"]) for r in received} == {("node", 1)}
    assert all(r["properties"] == {"origin": "rmq-node"} for r in received)
