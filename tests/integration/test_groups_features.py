"""Delays, transactions and request-reply over two broker groups.

Each group runs its own delay service, transaction check-back and reply path; a
topic's queues are on both, so a producer's sends land on both and each feature
must work wherever its message was stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from boltmq import (
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    TransactionProducer,
    reply,
)
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.v1 import message_pb2
from tests.integration.sdk_fixtures import FAST
from tests.integration.two_groups import GROUPS, create_topic, registry_of, start_two_groups
from tests.waiting import wait_until

DELAY_LEVEL_1_MS = 1_000
"""The default first delay level (1s)."""


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two groups whose brokers check an undecided transaction back after 400 ms."""
    started = start_two_groups(
        tmp_path_factory.mktemp("groups-features"),
        broker_settings=("transaction_timeout_ms=400", "transaction_check_interval_ms=100"),
    )
    try:
        yield started
    finally:
        started.stop()


class Seen:
    """A listener keeping (body, born, stored) of every message, thread-safely."""

    def __init__(self) -> None:
        self.got: dict[bytes, tuple[int, int]] = {}
        self.lock = threading.Lock()

    def __call__(self, messages: list[ReceivedMessage]) -> None:
        with self.lock:
            for m in messages:
                self.got[bytes(m.body)] = (m.born_timestamp, m.store_timestamp)

    def bodies(self) -> set[bytes]:
        with self.lock:
            return set(self.got)


@pytest.fixture
def consume(two_groups: LocalCluster) -> Iterator[Callable[..., PushConsumer]]:
    started: list[PushConsumer] = []

    def start(group: str, topic: str, listener: Any) -> PushConsumer:
        consumer = PushConsumer(
            registry_of(two_groups),
            group,
            {topic: "*"},
            listener,
            options=PushConsumerOptions(**FAST),
        ).start()
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.shutdown()


def test_delayed_messages_of_both_groups_arrive_after_their_delay(
    two_groups: LocalCluster, consume: Callable[..., PushConsumer]
) -> None:
    create_topic(two_groups, "GroupsDelay")
    seen = Seen()
    consume("cg-groups-delay", "GroupsDelay", seen)
    with Producer(registry_of(two_groups), "pg-groups-delay") as producer:
        sent = [
            producer.send(Message(topic="GroupsDelay", body=b"d%d" % i, delay_level=1))
            for i in range(12)
        ]
    assert {r.queue.broker_name for r in sent} == set(GROUPS)
    expected = {b"d%d" % i for i in range(12)}
    wait_until(lambda: seen.bodies() >= expected, "every delayed message")
    with seen.lock:
        waits = [stored - born for born, stored in seen.got.values()]
    assert min(waits) >= DELAY_LEVEL_1_MS, waits


class CommitOnCheck:
    def check_local_transaction(self, msg: message_pb2.MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_transactions_commit_roll_back_and_are_checked_back_on_both_groups(
    two_groups: LocalCluster, consume: Callable[..., PushConsumer]
) -> None:
    create_topic(two_groups, "GroupsTx")
    seen = Seen()
    consume("cg-groups-tx", "GroupsTx", seen)
    outcomes = {
        "commit": LocalTransactionState.COMMIT,
        "rollback": LocalTransactionState.ROLLBACK,
        "unknown": LocalTransactionState.UNKNOWN,  # decided by the check-back: commit
    }
    groups_of: dict[str, set[str]] = {name: set() for name in outcomes}
    with TransactionProducer(registry_of(two_groups), "tx-groups", CommitOnCheck()) as producer:
        for i in range(24):
            name = list(outcomes)[i % 3]
            result = producer.send_in_transaction(
                Message(topic="GroupsTx", body=f"{name}-{i}".encode()),
                lambda msg, state=outcomes[name]: state,
            )
            groups_of[name].add(result.send_result.queue.broker_name)
        committed = {
            f"{n}-{i}".encode() for i, n in enumerate(list(outcomes) * 8) if n != "rollback"
        }
        wait_until(lambda: seen.bodies() >= committed, "committed and checked-back messages")
    assert groups_of == {name: set(GROUPS) for name in outcomes}
    assert not {b for b in seen.bodies() if b.startswith(b"rollback")}


def test_request_reply_across_both_groups(two_groups: LocalCluster) -> None:
    create_topic(two_groups, "GroupsRpc")
    registry = registry_of(two_groups)
    with (
        Producer(registry, "rr-groups") as requester,
        Producer(registry, "rr-groups-responder") as responder,
    ):

        def listener(messages: list[ReceivedMessage]) -> None:
            for msg in messages:
                reply(responder, msg, b"re:" + bytes(msg.body))

        replier = PushConsumer(
            registry, "GroupsRpc-replier", {"GroupsRpc": "*"}, listener,
            options=PushConsumerOptions(**FAST),
        ).start()  # fmt: skip
        try:
            wait_until(lambda: len(replier.assigned) == 2 * len(GROUPS), "the replier's queues")
            answers = [
                requester.request(Message(topic="GroupsRpc", body=b"q%d" % i), timeout_ms=10_000)
                for i in range(8)
            ]
        finally:
            replier.shutdown()
    assert [bytes(a.body) for a in answers] == [b"re:q%d" % i for i in range(8)]
