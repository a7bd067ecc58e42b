"""SimpleConsumer end to end over two broker groups (a registry, and per group a store and
a broker, each its own process): receive from both, ack, change the invisible duration,
stale handles, long polls, two consumers of one group, compressed bodies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from boltmq import (
    Message,
    Producer,
    ProducerOptions,
    SimpleConsumer,
    SimpleConsumerError,
    SimpleMessage,
    StaleReceiptHandle,
)
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2_grpc
from tests.integration.broker_fixtures import upsert
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.two_groups import start_two_groups

GROUPS = ("broker-a", "broker-b")
WAIT_MS = 10_000
"""A receive that waits for something: it returns as soon as it has it."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = start_two_groups(tmp_path_factory.mktemp("simple"), CLUSTER_REGISTRY_SETTINGS)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def registry(cluster: LocalCluster) -> str:
    assert cluster.registry is not None
    return cluster.registry.address


@pytest.fixture(scope="module")
def brokers(cluster: LocalCluster) -> Iterator[list[broker_pb2_grpc.BrokerServiceStub]]:
    channels = [
        sync_channel(members[0].broker.address)
        for members in cluster.groups.values()
        if members[0].broker is not None
    ]
    yield [broker_pb2_grpc.BrokerServiceStub(channel) for channel in channels]
    for channel in channels:
        channel.close()


def create_topic(
    brokers: list[broker_pb2_grpc.BrokerServiceStub], topic: str, queues: int = 2
) -> None:
    """The topic on every broker group (each registers it with the registry at once)."""
    assert len(brokers) == len(GROUPS)
    for stub in brokers:
        upsert(stub, topic, queues)


def send(registry: str, topic: str, bodies: list[bytes], **options: object) -> set[str]:
    """Send ``bodies``; the broker groups they went to."""
    with Producer(registry, "simple-pg", options=ProducerOptions(**options)) as producer:  # type: ignore[arg-type]
        return {producer.send(Message(topic=topic, body=b)).queue.broker_name for b in bodies}


def receive_all(
    consumer: SimpleConsumer, count: int, invisible_ms: int = 60_000
) -> list[SimpleMessage]:
    got: list[SimpleMessage] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.receive(32, invisible_ms=invisible_ms, wait_ms=2_000)
    return got


def test_a_simple_consumer_receives_from_every_broker_group_and_acks(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleAll")
    bodies = [b"m%d" % i for i in range(20)]
    assert send(registry, "SimpleAll", bodies) == set(GROUPS)
    with SimpleConsumer(registry, "simple-all") as consumer:
        consumer.subscribe("SimpleAll")
        got = receive_all(consumer, len(bodies))
        assert sorted(m.body for m in got) == sorted(bodies)
        assert {m.queue.broker_name for m in got} == set(GROUPS)
        assert {m.delivery_attempt for m in got} == {1}
        for m in got:
            consumer.ack(m)
        assert consumer.receive(32, wait_ms=300) == []
        with pytest.raises(StaleReceiptHandle):
            consumer.ack(got[0])


def test_change_invisible_duration_replaces_the_handle(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleChange", queues=1)
    send(registry, "SimpleChange", [b"one"])
    with SimpleConsumer(registry, "simple-change", subscriptions={"SimpleChange": "*"}) as c:
        (m,) = receive_all(c, 1, invisible_ms=500)
        old = m.receipt_handle
        c.change_invisible_duration(m, 60_000)
        assert m.receipt_handle != old and m.invisible_until_ms > time.time() * 1000 + 50_000
        time.sleep(1.0)  # past the first invisible time: not received again
        assert c.receive(32) == []
        stale = SimpleMessage(**{**m.__dict__, "receipt_handle": old})
        with pytest.raises(StaleReceiptHandle, match="FAILED_PRECONDITION"):
            c.ack(stale)
        c.ack(m)


def test_an_unacked_message_is_received_again_with_the_next_attempt(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleAgain", queues=1)
    send(registry, "SimpleAgain", [b"again"])
    with SimpleConsumer(registry, "simple-again", subscriptions={"SimpleAgain": "*"}) as c:
        (first,) = receive_all(c, 1, invisible_ms=300)
        (second,) = c.receive(1, invisible_ms=60_000, wait_ms=WAIT_MS)
        assert (second.body, second.delivery_attempt) == (b"again", 2)
        assert second.msg_id == first.msg_id and second.unique_id == first.unique_id
        with pytest.raises(StaleReceiptHandle):
            c.ack(first)
        c.ack(second)


def test_a_waiting_receive_gets_a_message_sent_to_any_broker_group(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleWait")
    with SimpleConsumer(registry, "simple-wait", subscriptions={"SimpleWait": "*"}) as c:
        assert c.receive(32) == []
        waited: list[list[SimpleMessage]] = []
        waiter = threading.Thread(target=lambda: waited.append(c.receive(32, wait_ms=20_000)))
        waiter.start()
        time.sleep(0.3)
        send(registry, "SimpleWait", [b"late"])
        waiter.join(timeout=60)
        assert [[m.body for m in w] for w in waited] == [[b"late"]]


def test_two_consumers_of_one_group_never_hold_the_same_message(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleShare")
    bodies = [b"s%d" % i for i in range(30)]
    send(registry, "SimpleShare", bodies)
    one = SimpleConsumer(registry, "simple-share", subscriptions={"SimpleShare": "*"})
    two = SimpleConsumer(registry, "simple-share", subscriptions={"SimpleShare": "*"})
    try:
        got_one = one.receive(10, invisible_ms=60_000)
        got_two = receive_all(two, len(bodies) - len(got_one))
        assert not {m.body for m in got_one} & {m.body for m in got_two}
        assert sorted(m.body for m in got_one + got_two) == sorted(bodies)
    finally:
        one.shutdown()
        two.shutdown()


def test_a_compressed_body_is_received_as_it_was_sent(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleZip", queues=1)
    body = b"compress me " * 100
    send(registry, "SimpleZip", [body], compress_body_over=64)
    with SimpleConsumer(registry, "simple-zip", subscriptions={"SimpleZip": "*"}) as c:
        (m,) = receive_all(c, 1)
        assert m.body == body
        c.ack(m)


def test_bad_receives_are_refused(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleBad", queues=1)
    with SimpleConsumer(registry, "simple-bad") as c:
        with pytest.raises(ValueError, match="subscribe"):
            c.receive()
        c.subscribe("SimpleBad", "A || || B")
        with pytest.raises(SimpleConsumerError, match="INVALID_ARGUMENT"):
            c.receive(1)
        bad_arguments = (
            {"max_messages": 0},
            {"max_messages": 33},
            {"invisible_ms": 0},
            {"wait_ms": -1},
        )
        for bad in bad_arguments:
            with pytest.raises(ValueError):
                c.receive(**bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="must not be empty"):
            SimpleConsumer(registry, "")


def test_a_message_s_fifo_group_is_given_with_it(
    registry: str, brokers: list[broker_pb2_grpc.BrokerServiceStub]
) -> None:
    create_topic(brokers, "SimpleGroupOf", queues=1)
    with Producer(registry, "simple-pg") as producer:
        for body in (b"k1", b"k2"):
            message = Message(topic="SimpleGroupOf", body=body, properties={"__SHARDINGKEY": "K"})
            producer.send(message, sharding_key="K")
        producer.send(Message(topic="SimpleGroupOf", body=b"free"))
    with SimpleConsumer(registry, "simple-group-of", subscriptions={"SimpleGroupOf": "*"}) as c:
        got = {m.body: m.message_group for m in receive_all(c, 3)}
        assert got == {b"k1": "K", b"k2": "K", b"free": None}
