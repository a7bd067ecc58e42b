"""A broker group added to a running cluster takes queues, and running clients use them.

The cluster starts with broker-a alone, a producer and a consumer group running
on topic ``Grows``. broker-b is started into it; ``admin topic update --groups``
gives the existing topic queues there and a new auto-created topic spreads over
both. The running producer sends to broker-b once its route refreshes, and the
running consumers take broker-b's queues in their next rebalance and consume
everything (at least once: a queue handed between members is read again from
its last committed offset).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import (
    ConsumeResult,
    Message,
    Producer,
    ProducerOptions,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
)
from boltmq.cli.dev.local_cluster import LocalCluster
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.test_broker_groups import cli, registry_of, route_groups
from tests.integration.two_groups import start_two_groups
from tests.waiting import wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    started = start_two_groups(tmp_path, CLUSTER_REGISTRY_SETTINGS, groups=1)
    yield started
    started.stop()


def test_a_new_group_takes_queues_and_running_clients_use_them(cluster: LocalCluster) -> None:
    registry = registry_of(cluster)
    cli(cluster, "admin", "topic", "create", "Grows", "--queues", "2")
    got: list[ReceivedMessage] = []
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            got.extend(messages)
        return ConsumeResult.SUCCESS

    options = PushConsumerOptions(
        rebalance_interval_ms=300, long_poll_ms=1_000, commit_interval_ms=200, route_refresh_ms=300
    )
    consumers = [
        PushConsumer(registry, "grows-cg", {"Grows": "*"}, listener, options=options).start()
        for _ in range(2)
    ]
    producer = Producer(registry, "grows-pg", options=ProducerOptions(route_refresh_ms=300)).start()
    try:
        before = [producer.send(Message(topic="Grows", body=b"a%d" % i)) for i in range(8)]
        assert {r.queue.broker_name for r in before} == {"broker-a"}

        added = cluster.add_group()
        assert added == "broker-b"
        assert cli(
            cluster, "admin", "topic", "update", "Grows", "--queues", "2", "--groups", "broker-b"
        ) == ("broker-b: Grows queues 2/2 perm RW\n")
        assert route_groups(cluster, "Grows") == {"broker-a": 2, "broker-b": 2}
        wait_until(
            lambda: (
                {q.broker_name for c in consumers for q in c.assigned} == {"broker-a", "broker-b"}
            ),
            "the running consumers to take broker-b's queues",
        )
        after = []
        for i in range(32):
            after.append(producer.send(Message(topic="Grows", body=b"b%d" % i)))
        assert {r.queue.broker_name for r in after} == {"broker-a", "broker-b"}
        expected = {b"a%d" % i for i in range(8)} | {b"b%d" % i for i in range(32)}
        wait_until(
            lambda: {bytes(m.body) for m in list(got)} >= expected,
            "the group to consume every message",
        )
        with lock:
            bodies = [bytes(m.body) for m in got]
        # At least once: a queue handed between members while the new queues are shared
        # out may be read again from its last committed offset (docs/reliability.md).
        assert set(bodies) == expected

        spread = [producer.send(Message(topic="GrowsNew", body=b"n")) for _ in range(24)]
        assert {r.queue.broker_name for r in spread} == {"broker-a", "broker-b"}
    finally:
        producer.shutdown()
        for consumer in consumers:
            consumer.shutdown()
