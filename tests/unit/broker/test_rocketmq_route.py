"""QueryRoute's queue list (services/broker/rocketmq_v2/route.py): interleaved across groups."""

from __future__ import annotations

from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.v1 import registry_pb2
from services.broker.rocketmq_v2.route import queues_of


def route(*groups: tuple[str, int, str | None]) -> registry_pb2.TopicRoute:
    """(group, queues, master address or None) each."""
    return registry_pb2.TopicRoute(
        topic="T",
        queues=[
            registry_pb2.QueueData(broker_name=g, read_queue_nums=n, write_queue_nums=n, perm=6)
            for g, n, _ in groups
        ],
        brokers=[
            registry_pb2.BrokerData(broker_name=g, addresses={0: a} if a else {1: "127.0.0.1:9"})
            for g, _, a in groups
        ],
    )


def test_queues_alternate_between_groups_so_a_clients_retry_moves_to_another_group() -> None:
    queues = queues_of("T", route(("broker-b", 2, "127.0.0.1:2"), ("broker-a", 3, "127.0.0.1:1")))
    assert [(q.broker.name, q.id) for q in queues] == [
        ("broker-a", 0),
        ("broker-b", 0),
        ("broker-a", 1),
        ("broker-b", 1),
        ("broker-a", 2),
    ]
    assert {q.permission for q in queues} == {v2.READ_WRITE}
    assert queues[1].broker.endpoints.addresses[0].port == 2


def test_a_group_without_a_live_master_has_no_queues() -> None:
    queues = queues_of("T", route(("broker-a", 2, None), ("broker-b", 2, "127.0.0.1:2")))
    assert [(q.broker.name, q.id) for q in queues] == [("broker-b", 0), ("broker-b", 1)]
