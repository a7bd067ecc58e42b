"""The official RocketMQ 5 Python producer, unmodified, against a real BoltMQ cluster.

One cluster serves every test of the module: a registry and two broker groups (broker-a,
broker-b, a store each) as processes. The client's scripts connect to broker-a's gRPC
address only, and what they sent is read back with BoltMQ's own pull consumer. Topics
the client creates (auto-creation) live on broker-a; ``RmqTwoGroups`` and the topics of
the last tests are on both groups: one broker's address reaches every group, and a
tag-filtered PushConsumer and FIFO consumption work across them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2, service_pb2_grpc
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS, Cluster
from tests.integration.rocketmq.official_client import (
    consumptions,
    needs_official_client,
    of,
    run_client,
)
from tests.integration.sdk_fixtures import pull_everything
from tests.waiting import wait_until

pytestmark = needs_official_client
TRANSACTION_TIMEOUT_MS = 1000
TOPIC = "RmqTwoGroups"
QUEUES = 2
"""Queues of the topic on each group."""


class TwoGroups(Cluster):
    """broker-a (the conftest cluster's) and broker-b, with a store each, one registry."""

    def __init__(self, tmp_path: Path, broker_settings: tuple[str, ...] = ()) -> None:
        super().__init__(tmp_path, broker_settings)
        store_b = self._start("store", f"root_dir={tmp_path / 'store-b'}", *CLUSTER_STORE_SETTINGS)
        self.broker_b = self._start(
            "broker",
            f"store_address={store_b.address}",
            f"registry_addresses={self.registry.address}",
            "broker_name=broker-b",
            *CLUSTER_BROKER_SETTINGS,
        )
        self.addresses = {"broker-a": self.broker.address, "broker-b": self.broker_b.address}
        for address in self.addresses.values():
            broker_pb2_grpc.BrokerServiceStub(sync_channel(address)).UpsertTopic(
                broker_pb2.UpsertTopicRequest(
                    topic=registry_pb2.TopicConfig(
                        name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6
                    )
                ),
                timeout=10,
            )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoGroups]:
    started = TwoGroups(
        Path(tmp_path_factory.mktemp("rmq-producer")),
        (
            f"transaction_timeout_ms={TRANSACTION_TIMEOUT_MS}",
            "transaction_check_interval_ms=300",
        ),
    )
    yield started
    started.stop()


def bodies_of(cluster: Cluster, topic: str) -> list[str]:
    return sorted(bytes(m.body).decode() for m in pull_everything(cluster, topic))


def test_sync_and_async_sends_are_stored_with_their_ids_tags_keys_and_properties(
    cluster: Cluster,
) -> None:
    sync = of(run_client("rmq_producer.py", cluster.broker.address, "send", "RmqSync", "3"), "sent")
    asynchronous = of(
        run_client("rmq_producer.py", cluster.broker.address, "send_async", "RmqSync", "4"),
        "sent",
    )
    assert len(sync) == 3 and len(asynchronous) == 4
    stored = pull_everything(cluster, "RmqSync")
    assert sorted(bytes(m.body).decode() for m in stored) == sorted(
        [f"sync-{i}" for i in range(3)] + [f"async-{i}" for i in range(4)]
    )
    assert {m.unique_id for m in stored} == {e["message_id"] for e in sync + asynchronous}
    first = stored[0]
    assert first.tags == "t" and first.keys == ["k1"]
    assert first.properties["origin"] == "rmq-python"


def test_fifo_messages_of_one_group_share_a_queue_in_send_order(cluster: Cluster) -> None:
    sent = of(
        run_client("rmq_producer.py", cluster.broker.address, "fifo", "RmqFifo", "3", "12"), "sent"
    )
    assert len(sent) == 12
    stored = pull_everything(cluster, "RmqFifo")
    by_group: dict[str, list[tuple[int, int, str]]] = {}
    for m in stored:
        group = m.properties["__SHARDINGKEY"]
        by_group.setdefault(group, []).append((m.queue_id, m.queue_offset, bytes(m.body).decode()))
    assert sorted(by_group) == ["g0", "g1", "g2"]
    for group, entries in by_group.items():
        assert len({queue for queue, _, _ in entries}) == 1, (group, entries)
        in_queue_order = [body for _, _, body in sorted(entries)]
        assert in_queue_order == [f"{group}-{i}" for i in range(12) if f"g{i % 3}" == group]


def test_a_delayed_message_appears_only_after_its_delivery_time(cluster: Cluster) -> None:
    (sent,) = of(
        run_client("rmq_producer.py", cluster.broker.address, "delay", "RmqDelay", "3"), "sent"
    )
    assert bodies_of(cluster, "RmqDelay") == []  # scheduled, not yet in its topic
    wait_until(lambda: bodies_of(cluster, "RmqDelay") == ["delayed"], "the delayed message")
    assert time.time() * 1000 >= sent["due_ms"] - 1000  # the delay levels' 1 s grain
    (stored,) = pull_everything(cluster, "RmqDelay")
    assert stored.unique_id == sent["message_id"]


def test_transactions_commit_roll_back_and_resolve_an_orphan_by_check_back(
    cluster: Cluster,
) -> None:
    address = cluster.broker.address
    committed = run_client("rmq_producer.py", address, "transaction", "RmqTx", "commit")
    assert of(committed, "committed") and of(committed, "sent")[0]["transaction_id"]
    rolled_back = run_client("rmq_producer.py", address, "transaction", "RmqTx", "rollback")
    assert of(rolled_back, "rolled_back")
    assert bodies_of(cluster, "RmqTx") == ["tx-commit"]
    # An orphan: the producer never decides; the broker asks its checker (COMMIT).
    orphan = run_client(
        "rmq_producer.py",
        address,
        "transaction",
        "RmqTx",
        "orphan",
        str(TRANSACTION_TIMEOUT_MS / 1000 + 4),
    )
    (sent,) = of(orphan, "sent")
    checks = of(orphan, "check")
    assert checks and checks[0]["message_id"] == sent["message_id"]
    assert checks[0]["body"] == "tx-orphan"
    wait_until(
        lambda: bodies_of(cluster, "RmqTx") == ["tx-commit", "tx-orphan"], "the checked commit"
    )


def test_query_route_names_every_groups_queues_and_broker(cluster: TwoGroups) -> None:
    stub = service_pb2_grpc.MessagingServiceStub(sync_channel(cluster.addresses["broker-a"]))
    answer = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=v2.Resource(name=TOPIC)), timeout=10
    )
    assert answer.status.code == v2.OK, answer.status.message
    seen = {
        (q.broker.name, q.id, f"{a.host}:{a.port}")
        for q in answer.message_queues
        for a in q.broker.endpoints.addresses
    }
    assert seen == {
        (group, queue, address)
        for group, address in cluster.addresses.items()
        for queue in range(QUEUES)
    }


def test_the_official_clients_send_to_and_receive_from_both_groups(
    cluster: TwoGroups,
) -> None:
    address = cluster.addresses["broker-a"]
    sent = of(run_client("rmq_producer.py", address, "send", TOPIC, "8"), "sent")
    stored = pull_everything(cluster, TOPIC)
    assert sorted(m.unique_id for m in stored) == sorted(s["message_id"] for s in sent)
    for address in cluster.addresses.values():  # both groups hold some
        status = broker_pb2_grpc.BrokerServiceStub(sync_channel(address)).TopicStatus(
            broker_pb2.TopicStatusRequest(topic=TOPIC), timeout=10
        )
        assert sum(q.max_offset for q in status.queues) > 0, address
    events = run_client("rmq_consumer.py", address, "drain", "rmq-two", TOPIC, "8", "40")
    received = of(events, "received")
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)


def on_both_groups(cluster: TwoGroups, topic: str, orderly_group: str = "") -> None:
    """``topic`` (and an orderly consumer group) on both broker groups."""
    for address in cluster.addresses.values():
        stub = broker_pb2_grpc.BrokerServiceStub(sync_channel(address))
        stub.UpsertTopic(
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name=topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6
                )
            ),
            timeout=10,
        )
        if orderly_group:
            stub.UpsertGroup(
                broker_pb2.UpsertGroupRequest(group=orderly_group, consume_message_orderly=True),
                timeout=10,
            )


def groups_holding(cluster: TwoGroups, topic: str) -> set[str]:
    held = set()
    for name, address in cluster.addresses.items():
        status = broker_pb2_grpc.BrokerServiceStub(sync_channel(address)).TopicStatus(
            broker_pb2.TopicStatusRequest(topic=topic), timeout=10
        )
        if sum(q.max_offset for q in status.queues):
            held.add(name)
    return held


def test_a_tag_filtered_push_consumer_gets_failed_messages_again_from_both_groups(
    cluster: TwoGroups,
) -> None:
    on_both_groups(cluster, "RmqTwoTags")
    address = cluster.addresses["broker-a"]
    sent = of(run_client("rmq_producer.py", address, "tagged", "RmqTwoTags", "8", "a,b"), "sent")
    assert groups_holding(cluster, "RmqTwoTags") == set(cluster.addresses)
    events = run_client(
        "rmq_push_consumer.py", address, "rmq-two-push", "RmqTwoTags", "4", "60", "fail_first", "a"
    )
    consumed = of(events, "consumed")
    assert {c["tag"] for c in consumed} == {"a"}  # the filter: no "b" is delivered
    for message in sent:
        mine = consumptions(consumed, message["message_id"])
        assert mine == ([(1, "FAILURE"), (2, "SUCCESS")] if message["tag"] == "a" else [])
    assert of(events, "done") == [{"event": "done", "succeeded": 4}]


def test_fifo_messages_are_consumed_in_order_across_both_groups(cluster: TwoGroups) -> None:
    on_both_groups(cluster, "RmqTwoFifo", orderly_group="rmq-two-fifo")
    address = cluster.addresses["broker-a"]
    sent = of(run_client("rmq_producer.py", address, "fifo", "RmqTwoFifo", "4", "16"), "sent")
    assert len(sent) == 16
    assert groups_holding(cluster, "RmqTwoFifo") == set(cluster.addresses)
    events = run_client(
        "rmq_consumer.py", address, "drain", "rmq-two-fifo", "RmqTwoFifo", "16", "60"
    )
    received = of(events, "received")
    assert len(received) == 16
    for group in ("g0", "g1", "g2", "g3"):
        bodies = [r["body"] for r in received if r["group"] == group]
        assert bodies == [f"{group}-{i}" for i in range(int(group[1]), 16, 4)]
