"""The registry's route table: registration, routes, expiry and validation, with a fake clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.registry.errors import InvalidRequest
from services.registry.route_table import (
    BrokerMember,
    QueueRoute,
    Registration,
    RouteTable,
    TopicSettings,
)

EXPIRY_MS = 1_000
CLUSTER = "DefaultCluster"


class FakeClock:
    """Milliseconds that move only when the test says so."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def topic(name: str, queues: int = 4, perm: int = 6, order: bool = False) -> TopicSettings:
    return TopicSettings(name, queues, queues, perm, order)


def registration(
    broker_name: str,
    broker_id: int,
    address: str,
    *topics: TopicSettings,
    ha_address: str = "",
    data_version: int = 0,
    cluster: str = CLUSTER,
) -> Registration:
    return Registration(
        BrokerMember(cluster, broker_name, broker_id, address), ha_address, topics, data_version
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def table(clock: FakeClock) -> RouteTable:
    return RouteTable(EXPIRY_MS, clock_ms=clock, wall_clock_ms=lambda: 1_700_000_000_000)


def test_route_has_queues_and_addresses_of_every_group_serving_the_topic(table: RouteTable) -> None:
    table.register(registration("broker-b", 0, "10.0.0.2:10911", topic("orders", 8)))
    table.register(
        registration("broker-a", 0, "10.0.0.1:10911", topic("orders", 4), topic("audit", 2))
    )

    route = table.get_route("orders")

    assert route is not None
    assert route.topic == "orders"
    assert route.queues == (QueueRoute("broker-a", 4, 4, 6), QueueRoute("broker-b", 8, 8, 6))
    assert [(b.cluster_name, b.broker_name, dict(b.addresses)) for b in route.brokers] == [
        (CLUSTER, "broker-a", {0: "10.0.0.1:10911"}),
        (CLUSTER, "broker-b", {0: "10.0.0.2:10911"}),
    ]
    audit = table.get_route("audit")
    assert audit is not None and [q.broker_name for q in audit.queues] == ["broker-a"]
    assert table.get_route("unknown") is None


def test_queue_numbers_come_from_the_master_and_every_member_address_is_listed(
    table: RouteTable,
) -> None:
    table.register(registration("broker-a", 1, "10.0.0.11:10911", topic("orders", 2, perm=4)))
    table.register(registration("broker-a", 0, "10.0.0.10:10911", topic("orders", 8, perm=6)))
    table.register(registration("broker-a", 2, "10.0.0.12:10911", topic("orders", 3, perm=4)))

    route = table.get_route("orders")

    assert route is not None
    assert route.queues == (QueueRoute("broker-a", 8, 8, 6),)
    assert dict(route.brokers[0].addresses) == {
        0: "10.0.0.10:10911",
        1: "10.0.0.11:10911",
        2: "10.0.0.12:10911",
    }


def test_without_a_master_the_lowest_replica_serving_the_topic_gives_the_queues(
    table: RouteTable,
) -> None:
    table.register(registration("broker-a", 2, "10.0.0.12:10911", topic("orders", 3, perm=4)))
    table.register(registration("broker-a", 1, "10.0.0.11:10911", topic("orders", 2, perm=4)))

    route = table.get_route("orders")

    assert route is not None
    assert route.queues == (QueueRoute("broker-a", 2, 2, 4),)
    assert dict(route.brokers[0].addresses) == {1: "10.0.0.11:10911", 2: "10.0.0.12:10911"}


def test_a_live_master_that_dropped_a_topic_hides_it_even_if_a_replica_still_lists_it(
    table: RouteTable,
) -> None:
    table.register(registration("broker-a", 0, "10.0.0.10:10911", topic("kept")))
    table.register(registration("broker-a", 1, "10.0.0.11:10911", topic("kept"), topic("gone")))

    assert table.get_route("gone") is None
    assert table.get_route("kept") is not None


def test_re_registration_replaces_the_topic_set(table: RouteTable) -> None:
    table.register(
        registration("broker-a", 0, "10.0.0.1:10911", topic("orders"), topic("old"), data_version=1)
    )
    table.register(
        registration(
            "broker-a", 0, "10.0.0.1:10911", topic("orders", 16), topic("new"), data_version=2
        )
    )

    assert table.get_route("old") is None
    new = table.get_route("new")
    assert new is not None and new.queues[0].broker_name == "broker-a"
    orders = table.get_route("orders")
    assert orders is not None and orders.queues[0].write_queue_nums == 16
    [live] = table.cluster_info()
    assert (live.data_version, live.topic_count) == (2, 2)


def test_register_reports_whether_the_broker_is_new(table: RouteTable) -> None:
    assert table.register(registration("broker-a", 0, "10.0.0.1:10911")) is True
    assert table.register(registration("broker-a", 0, "10.0.0.1:10911")) is False


def test_order_flag_comes_from_the_topic_config(table: RouteTable) -> None:
    table.register(
        registration("broker-a", 0, "10.0.0.1:10911", topic("fifo", order=True), topic("plain"))
    )

    fifo, plain = table.get_route("fifo"), table.get_route("plain")

    assert fifo is not None and fifo.order is True
    assert plain is not None and plain.order is False


def test_a_broker_silent_longer_than_the_expiry_is_dropped_with_its_routes(
    table: RouteTable, clock: FakeClock
) -> None:
    table.register(registration("broker-a", 0, "10.0.0.1:10911", topic("orders"), topic("only-a")))
    table.register(registration("broker-b", 0, "10.0.0.2:10911", topic("orders")))
    clock.advance(EXPIRY_MS // 2)
    table.register(registration("broker-b", 0, "10.0.0.2:10911", topic("orders")))

    clock.advance(EXPIRY_MS // 2)  # broker-a silent for exactly the expiry: still alive
    assert table.expire() == []
    assert table.get_route("only-a") is not None

    clock.advance(1)
    dropped = table.expire()

    assert [(b.broker_name, b.address) for b in dropped] == [("broker-a", "10.0.0.1:10911")]
    assert table.get_route("only-a") is None
    orders = table.get_route("orders")
    assert orders is not None
    assert [q.broker_name for q in orders.queues] == ["broker-b"]
    assert [b.broker_name for b in table.cluster_info()] == ["broker-b"]
    assert len(table) == 1


def test_reads_skip_expired_brokers_without_an_explicit_expiry_pass(
    table: RouteTable, clock: FakeClock
) -> None:
    table.register(registration("broker-a", 0, "10.0.0.1:10911", topic("orders")))
    clock.advance(EXPIRY_MS + 1)

    assert table.get_route("orders") is None
    assert table.cluster_info() == []


def test_an_expired_master_leaves_the_replica_serving_with_its_own_queue_numbers(
    table: RouteTable, clock: FakeClock
) -> None:
    table.register(registration("broker-a", 0, "10.0.0.10:10911", topic("orders", 8)))
    table.register(registration("broker-a", 1, "10.0.0.11:10911", topic("orders", 8, perm=4)))
    clock.advance(EXPIRY_MS)
    table.register(registration("broker-a", 1, "10.0.0.11:10911", topic("orders", 8, perm=4)))
    clock.advance(1)

    route = table.get_route("orders")

    assert route is not None
    assert route.queues == (QueueRoute("broker-a", 8, 8, 4),)
    assert dict(route.brokers[0].addresses) == {1: "10.0.0.11:10911"}


def test_unregister_drops_the_broker_only_at_the_registered_address(table: RouteTable) -> None:
    table.register(registration("broker-a", 0, "10.0.0.1:10911", topic("orders")))
    stale = BrokerMember(CLUSTER, "broker-a", 0, "10.0.0.9:10911")

    assert table.unregister(stale) is False
    assert table.get_route("orders") is not None

    assert table.unregister(BrokerMember(CLUSTER, "broker-a", 0, "10.0.0.1:10911")) is True
    assert table.get_route("orders") is None
    assert table.unregister(BrokerMember(CLUSTER, "broker-a", 0, "10.0.0.1:10911")) is False


def test_a_replica_promoted_to_master_keeps_one_entry_for_its_address(table: RouteTable) -> None:
    table.register(registration("broker-a", 1, "10.0.0.11:10911", topic("orders")))
    table.register(registration("broker-a", 0, "10.0.0.11:10911", topic("orders")))

    route = table.get_route("orders")

    assert route is not None
    assert dict(route.brokers[0].addresses) == {0: "10.0.0.11:10911"}
    assert [b.broker_id for b in table.cluster_info()] == [0]


def test_a_broker_that_moved_is_listed_at_its_new_address_only(table: RouteTable) -> None:
    table.register(registration("broker-a", 0, "10.0.0.1:10911", topic("orders")))
    table.register(registration("broker-a", 0, "10.0.0.5:10911", topic("orders")))
    # The old address is free again: another broker may use it without evicting broker-a.
    table.register(registration("broker-b", 0, "10.0.0.1:10911", topic("orders")))

    route = table.get_route("orders")

    assert route is not None
    assert {b.broker_name: dict(b.addresses) for b in route.brokers} == {
        "broker-a": {0: "10.0.0.5:10911"},
        "broker-b": {0: "10.0.0.1:10911"},
    }
    assert table.unregister(BrokerMember(CLUSTER, "broker-a", 0, "10.0.0.1:10911")) is False


def test_cluster_info_reports_every_registered_field(table: RouteTable) -> None:
    table.register(
        registration("broker-b", 0, "10.0.0.2:10911", ha_address="10.0.0.2:10912", data_version=7)
    )
    table.register(
        registration(
            "broker-a",
            1,
            "10.0.0.11:10911",
            topic("x"),
            topic("y"),
            ha_address="10.0.0.11:10912",
            data_version=3,
        )
    )

    info = table.cluster_info()

    assert [
        (
            b.broker_name,
            b.broker_id,
            b.address,
            b.ha_address,
            b.data_version,
            b.topic_count,
            b.last_update_ms,
        )
        for b in info
    ] == [
        ("broker-a", 1, "10.0.0.11:10911", "10.0.0.11:10912", 3, 2, 1_700_000_000_000),
        ("broker-b", 0, "10.0.0.2:10911", "10.0.0.2:10912", 7, 0, 1_700_000_000_000),
    ]


def test_groups_with_the_same_broker_name_in_two_clusters_stay_apart(table: RouteTable) -> None:
    table.register(registration("broker-a", 0, "10.0.0.1:10911", topic("orders"), cluster="east"))
    table.register(registration("broker-a", 0, "10.1.0.1:10911", topic("orders"), cluster="west"))

    route = table.get_route("orders")

    assert route is not None
    assert [(b.cluster_name, dict(b.addresses)) for b in route.brokers] == [
        ("east", {0: "10.0.0.1:10911"}),
        ("west", {0: "10.1.0.1:10911"}),
    ]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: BrokerMember("", "broker-a", 0, "h:1"), "cluster_name"),
        (lambda: BrokerMember(CLUSTER, "", 0, "h:1"), "broker_name"),
        (lambda: BrokerMember(CLUSTER, "../etc", 0, "h:1"), "broker_name"),
        (lambda: BrokerMember(CLUSTER, "broker-a", -1, "h:1"), "broker_id"),
        (lambda: BrokerMember(CLUSTER, "broker-a", 0, ""), "address"),
        (lambda: BrokerMember(CLUSTER, "broker-a", 0, "no-port"), "address"),
        (lambda: BrokerMember(CLUSTER, "broker-a", 0, "h:70000"), "address"),
        (lambda: registration("broker-a", 0, "h:1", ha_address="h:"), "ha_address"),
        (lambda: registration("broker-a", 0, "h:1", topic("ok"), topic("a/b")), "topics[1].name"),
        (lambda: registration("broker-a", 0, "h:1", topic("x" * 128)), "topics[0].name"),
        (lambda: registration("broker-a", 0, "h:1", topic("t"), topic("t")), "topics[1].name"),
        (
            lambda: registration("broker-a", 0, "h:1", TopicSettings("t", -1, 4, 6)),
            "topics[0].read_queue_nums",
        ),
        (
            lambda: registration("broker-a", 0, "h:1", TopicSettings("t", 4, 70_000, 6)),
            "topics[0].write_queue_nums",
        ),
        (lambda: registration("broker-a", 0, "h:1", topic("t", perm=8)), "topics[0].perm"),
    ],
)
def test_invalid_fields_are_named(build: Callable[[], object], field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        build()
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


@pytest.mark.parametrize("name", ["", "a.b", "../../etc", "x" * 128, "sp ace"])
def test_get_route_rejects_a_bad_topic_name(table: RouteTable, name: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        table.get_route(name)
    assert caught.value.field == "topic"


def test_valid_ipv6_and_unusual_names_are_accepted(table: RouteTable) -> None:
    table.register(registration("broker|a%1", 0, "[::1]:10911", topic("%RETRY%group-1")))

    route = table.get_route("%RETRY%group-1")

    assert route is not None and dict(route.brokers[0].addresses) == {0: "[::1]:10911"}


# --------------------------------------------------------------------------- epochs (HA)


def epoch_registration(broker_id: int, address: str, epoch: int) -> Registration:
    return Registration(
        BrokerMember(CLUSTER, "broker-a", broker_id, address), "", (topic("orders"),), 0, epoch
    )


def test_an_old_master_is_refused_while_a_newer_epoch_master_is_live(
    table: RouteTable, clock: FakeClock
) -> None:
    table.register(epoch_registration(0, "10.0.0.1:10911", 0))
    table.register(epoch_registration(1, "10.0.0.2:10911", 0))
    promoted = epoch_registration(0, "10.0.0.2:10911", 1)
    assert table.superseded(promoted) is None
    table.register(promoted)  # the replica moves from id 1 to id 0
    old_master = epoch_registration(0, "10.0.0.1:10911", 0)
    refused = table.superseded(old_master)
    assert refused is not None
    assert (refused.master.address, refused.master.epoch) == ("10.0.0.2:10911", 1)
    assert refused.suggested_broker_id == 1  # id 1 is free again
    route = table.get_route("orders")
    assert route is not None and dict(route.brokers[0].addresses) == {0: "10.0.0.2:10911"}
    table.register(epoch_registration(1, "10.0.0.1:10911", 1))  # it rejoins as a replica
    route = table.get_route("orders")
    assert route is not None
    assert dict(route.brokers[0].addresses) == {0: "10.0.0.2:10911", 1: "10.0.0.1:10911"}
    clock.advance(EXPIRY_MS + 1)  # the new master dies: the old one may take id 0 again
    assert table.superseded(old_master) is None


def test_equal_or_newer_epoch_replaces_the_master_and_replicas_are_never_refused(
    table: RouteTable,
) -> None:
    table.register(epoch_registration(0, "10.0.0.1:10911", 3))
    assert table.superseded(epoch_registration(0, "10.0.0.9:10911", 3)) is None
    assert table.superseded(epoch_registration(0, "10.0.0.9:10911", 4)) is None
    assert table.superseded(epoch_registration(2, "10.0.0.9:10911", 0)) is None
    assert table.superseded(epoch_registration(0, "10.0.0.1:10911", 0)) is None  # same broker


def test_negative_epoch_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="epoch"):
        epoch_registration(0, "10.0.0.1:10911", -1)
