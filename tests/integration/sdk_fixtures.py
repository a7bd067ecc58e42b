"""What the SDK's integration tests share: a producer, started consumers, a listener.

The tests talk to the ``cluster`` fixture's processes (tests/integration/conftest.py)
through :class:`boltmq.Producer`, :class:`boltmq.PushConsumer` and
:class:`boltmq.PullConsumer` only; what is asserted is what an application sees:
which messages its listener got, in which order, on which queues, and what the
group's committed offsets say. Waiting is a poll with a deadline; a deadline that
passes is a failure with the state that was still missing.

The fixtures ``producer`` and ``consumers`` are imported by name into each test
module that uses them (``import producer as producer`` marks the re-export).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from boltmq import (
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import Cluster
from tests.waiting import wait_until

DEADLINE_S = 30.0
"""Generous bound for anything asynchronous to show; tests pass as soon as it does."""
FAST = dict(
    rebalance_interval_ms=300, long_poll_ms=2_000, commit_interval_ms=200, suspend_on_failure_ms=100
)
"""Consumer intervals for tests: rebalance and commit within a fraction of a second."""
QUEUES = 4
"""Queues of an auto-created topic (the producer's default_topic_queue_nums)."""


@dataclass(frozen=True)
class Got:
    """What a listener saw of one message (copied out of the pull buffer)."""

    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    msg_id: str
    queue_id: int
    queue_offset: int
    properties: dict[str, str]


class Collector:
    """A listener that records every message it is given, thread-safely."""

    def __init__(self, outcome: Callable[[list[ReceivedMessage]], Any] | None = None) -> None:
        self.got: list[Got] = []
        self.calls: list[int] = []
        self.outcome = outcome
        self._lock = threading.Lock()

    def __call__(self, messages: list[ReceivedMessage]) -> Any:
        with self._lock:
            self.calls.append(len(messages))
            self.got += [
                Got(
                    bytes(m.body),
                    m.tags,
                    tuple(m.keys),
                    m.msg_id,
                    m.queue_id,
                    m.queue_offset,
                    dict(m.properties),
                )
                for m in messages
            ]
        return self.outcome(messages) if self.outcome else ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [g.body for g in self.got]

    def wait_for(self, expected: set[bytes], what: str = "messages") -> None:
        wait_until(
            lambda: expected <= set(self.bodies()),
            f"{what}: missing {sorted(expected - set(self.bodies()))[:5]}",
        )


@pytest.fixture
def producer(cluster: Cluster) -> Iterator[Producer]:
    with Producer(cluster.registry.address, "test-pg") as made:
        yield made


@pytest.fixture
def consumers(cluster: Cluster) -> Iterator[Callable[..., PushConsumer]]:
    """``consumers(group, {topic: expr}, listener, **options)``: started, shut down at the end."""
    made: list[PushConsumer] = []

    def start(
        group: str, subscriptions: dict[str, str], listener: Any, **options: Any
    ) -> PushConsumer:
        consumer = PushConsumer(
            cluster.registry.address,
            group,
            subscriptions,
            listener,
            options=PushConsumerOptions(**{**FAST, **options}),
        )
        made.append(consumer)
        return consumer.start()

    yield start
    for consumer in made:
        consumer.shutdown()


def send_all(
    producer: Producer, topic: str, bodies: list[bytes], **fields: Any
) -> list[SendResult]:
    results = [producer.send(Message(topic=topic, body=b, **fields)) for b in bodies]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    return results


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i:04d}".encode() for i in range(count)]


def group_lag(cluster: Cluster, group: str, topic: str) -> int | None:
    """Messages of ``topic`` not yet committed by ``group`` (None before any heartbeat)."""
    chan = sync_channel(cluster.broker.address)
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(chan)
        try:
            progress = stub.GroupProgress(broker_pb2.GroupProgressRequest(group=group), timeout=5)
        except grpc.RpcError:
            return None  # the group is not known yet, or the broker is restarting
        return sum(q.lag for q in progress.queues if q.topic == topic)
    finally:
        chan.close()


def pull_everything(cluster: Cluster, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic``, queue by queue, with a PullConsumer."""
    out: list[ReceivedMessage] = []
    with PullConsumer(cluster.registry.address, "probe") as puller:
        for queue in puller.queues(topic):
            offset = 0
            while True:
                result = puller.pull(queue, offset)
                if result.status is not PullStatus.FOUND:
                    break
                out += result.messages
                offset = result.next_begin_offset
    return out
