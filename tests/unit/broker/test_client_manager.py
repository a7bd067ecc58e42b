"""ClientManager: group membership from heartbeats, sorted ids, expiry of silent clients."""

from __future__ import annotations

from services.broker.clients.client_manager import (
    BROADCASTING,
    ClientInfo,
    ClientManager,
    ConsumerGroupHeartbeat,
)
from tests.unit.broker.conftest import ManualClock

EXPIRY_MS = 120_000


def beat(group: str, *subscriptions: tuple[str, str]) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(group, subscriptions=tuple(subscriptions))


def test_members_are_listed_sorted_whatever_the_heartbeat_order(clock: ManualClock) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    for client_id in ("c-3", "c-1", "c-2"):
        clients.heartbeat(client_id, [], [beat("g1")])
    assert clients.consumer_ids("g1") == ["c-1", "c-2", "c-3"]
    assert clients.consumer_ids("unknown") == []


def test_heartbeat_reports_groups_whose_membership_changed(clock: ManualClock) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    assert clients.heartbeat("c-1", [], [beat("g1"), beat("g2")]) == ["g1", "g2"]
    assert clients.heartbeat("c-1", [], [beat("g1")]) == []
    assert clients.heartbeat("c-2", [], [beat("g1")]) == ["g1"]


def test_a_silent_client_disappears_from_reads_at_once_and_from_memory_on_expire(
    clock: ManualClock,
) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    clients.heartbeat("c-1", ["pg"], [beat("g1")])
    clock.advance(EXPIRY_MS // 2)
    clients.heartbeat("c-2", [], [beat("g1")])
    clock.advance(EXPIRY_MS // 2)
    # c-1 has now been silent for exactly the expiry: it is gone; c-2 is not.
    assert clients.consumer_ids("g1") == ["c-2"]
    assert clients.producer_ids("pg") == []
    assert clients.expire() == [("g1", "c-1")]
    assert clients.expire() == []
    clock.advance(EXPIRY_MS)
    assert clients.expire() == [("g1", "c-2")]
    assert clients.consumer_groups() == []


def test_heartbeats_keep_a_client_alive(clock: ManualClock) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    for _ in range(5):
        clients.heartbeat("c-1", [], [beat("g1")])
        clock.advance(EXPIRY_MS - 1)
    assert clients.consumer_ids("g1") == ["c-1"]
    assert clients.expire() == []


def test_unregister_removes_the_client_from_the_named_groups_only(clock: ManualClock) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    clients.heartbeat("c-1", ["pg"], [beat("g1"), beat("g2")])
    clients.heartbeat("c-2", [], [beat("g1")])
    assert clients.unregister("c-1", ["pg"], ["g1", "g3"]) == ["g1"]
    assert clients.consumer_ids("g1") == ["c-2"]
    assert clients.consumer_ids("g2") == ["c-1"]
    assert clients.producer_ids("pg") == []


def test_group_view_carries_model_orderly_and_subscriptions(clock: ManualClock) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    clients.heartbeat(
        "c-1",
        [],
        [
            ConsumerGroupHeartbeat(
                "g1", BROADCASTING, True, (("orders", "A || B"), ("payments", "*"))
            )
        ],
    )
    view = clients.consumer_group("g1")
    assert view is not None
    assert view.client_ids == ("c-1",)
    assert (view.model, view.orderly) == (BROADCASTING, True)
    assert view.subscriptions == (("orders", "A || B"), ("payments", "*"))
    clock.advance(EXPIRY_MS)
    assert clients.consumer_group("g1") is None


def test_members_keep_their_own_subscriptions_and_the_last_heartbeat_wins(
    clock: ManualClock,
) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    clients.heartbeat("c-1", [], [beat("g1", ("orders", "A"))])
    clients.heartbeat("c-2", [], [beat("g1", ("orders", "B"), ("payments", "*"))])
    view = clients.consumer_group("g1")
    assert view is not None
    assert view.subscriptions == (("orders", "B"), ("payments", "*"))
    members = {m.client_id: m.subscriptions for m in clients.members("g1")}
    assert members == {"c-1": (("orders", "A"),), "c-2": (("orders", "B"), ("payments", "*"))}
    clients.heartbeat("c-1", [], [beat("g1", ("orders", "A"))])
    view = clients.consumer_group("g1")
    assert view is not None and view.subscriptions == (("orders", "A"),)
    clients.unregister("c-2", [], ["g1"])
    assert [m.client_id for m in clients.members("g1")] == ["c-1"]


def test_connections_keep_address_language_version_and_first_heartbeat(
    clock: ManualClock,
) -> None:
    wall = ManualClock()
    clients = ClientManager(EXPIRY_MS, clock, wall)
    wall.advance(1_000)
    first = ClientInfo("127.0.0.1:5000", "PYTHON", "0.1.0")
    clients.heartbeat("p-1", ["pg"], [], first)
    wall.advance(5_000)
    moved = ClientInfo("127.0.0.1:5001", "PYTHON", "0.2.0")
    clients.heartbeat("p-1", ["pg"], [beat("g1", ("orders", "*"))], moved)
    (producer,) = clients.connections("pg", producers=True)
    assert producer.client_id == "p-1"
    assert producer.info == moved  # the last heartbeat's connection ...
    assert producer.since_ms == 1_000_000 + 1_000  # ... known since the first
    (consumer,) = clients.connections("g1", producers=False)
    assert (consumer.model, consumer.subscriptions) == ("CLUSTERING", (("orders", "*"),))
    assert clients.connections("g1", producers=True) == []
    assert clients.connections("pg", producers=False) == []


def test_a_connection_is_forgotten_once_its_client_left_every_group(clock: ManualClock) -> None:
    wall = ManualClock()
    clients = ClientManager(EXPIRY_MS, clock, wall)
    clients.heartbeat("p-1", ["pg"], [], ClientInfo("h:1", "PYTHON", "0.1.0"))
    clock.advance(EXPIRY_MS)
    assert clients.connections("pg", producers=True) == []  # silent: not listed
    clients.expire()
    wall.advance(9_000)
    clients.heartbeat("p-1", ["pg"], [], ClientInfo("h:1", "PYTHON", "0.1.0"))
    (again,) = clients.connections("pg", producers=True)
    assert again.since_ms == 1_000_000 + 9_000  # a new connection
    clients.unregister("p-1", ["pg"], [])
    assert clients.connections("pg", producers=True) == []


def test_only_members_subscribing_as_most_do_share_the_queues(clock: ManualClock) -> None:
    clients = ClientManager(EXPIRY_MS, clock)
    tag_a = ("orders", "A", "TAG")
    sql = ("orders", "a > 1", "SQL92")
    clients.heartbeat("c-2", [], [beat("g1", tag_a)])
    clients.heartbeat("c-1", [], [beat("g1", sql)])  # unlike the first: a tie, c-2 joined first
    assert clients.consumer_ids("g1") == ["c-1", "c-2"]
    assert clients.allocation_ids("g1") == ["c-2"]
    clients.heartbeat("c-3", [], [beat("g1", sql)])  # now most subscribe by SQL
    assert clients.allocation_ids("g1") == ["c-1", "c-3"]
    clients.heartbeat("c-2", [], [beat("g1", sql)])  # it subscribes alike: it shares again
    assert clients.allocation_ids("g1") == ["c-1", "c-2", "c-3"]
    clients.heartbeat("c-2", [], [beat("g1", ("orders", "a > 1", "TAG"))])  # the type counts
    assert clients.allocation_ids("g1") == ["c-1", "c-3"]
    clock.advance(EXPIRY_MS + 1)  # everyone silent: nobody shares
    assert clients.allocation_ids("g1") == []
    assert clients.allocation_ids("unknown") == []
