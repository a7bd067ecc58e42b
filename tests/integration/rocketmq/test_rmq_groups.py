"""The RocketMQ 5 protocol over two broker groups: one broker's address is enough.

A client given only broker-a's address learns every queue of a topic on both groups
from QueryRoute, with each group's own broker address, and sends to and receives from
both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2, service_pb2_grpc
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS, Cluster
from tests.integration.rocketmq.official_client import needs_official_client, of, run_client
from tests.integration.sdk_fixtures import pull_everything

TOPIC = "RmqTwoGroups"
QUEUES = 2
"""Queues of the topic on each group."""


class TwoGroups(Cluster):
    """broker-a (the conftest cluster's) and broker-b, with a store each, one registry."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
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
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoGroups]:
    started = TwoGroups(Path(tmp_path_factory.mktemp("rmq-groups")))
    yield started
    started.stop()


def test_query_route_names_every_groups_queues_and_broker(two_groups: TwoGroups) -> None:
    stub = service_pb2_grpc.MessagingServiceStub(sync_channel(two_groups.addresses["broker-a"]))
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
        for group, address in two_groups.addresses.items()
        for queue in range(QUEUES)
    }


@needs_official_client
def test_the_official_clients_send_to_and_receive_from_both_groups(
    two_groups: TwoGroups,
) -> None:
    address = two_groups.addresses["broker-a"]
    sent = of(run_client("rmq_producer.py", address, "send", TOPIC, "8"), "sent")
    stored = pull_everything(two_groups, TOPIC)
    assert sorted(m.unique_id for m in stored) == sorted(s["message_id"] for s in sent)
    for address in two_groups.addresses.values():  # both groups hold some
        status = broker_pb2_grpc.BrokerServiceStub(sync_channel(address)).TopicStatus(
            broker_pb2.TopicStatusRequest(topic=TOPIC), timeout=10
        )
        assert sum(q.max_offset for q in status.queues) > 0, address
    events = run_client("rmq_consumer.py", address, "drain", "rmq-two", TOPIC, "8", "40")
    received = of(events, "received")
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
