"""A topic over two broker groups: creation, sends, a consumer group, lookups.

One :class:`~boltmq.cli.dev.local_cluster.LocalCluster` with two groups
(broker-a and broker-b, what ``boltmq dev --broker-groups 2`` runs, on free
ports) serves every test of the module: a registry and per group a store and
a broker, each its own process. Topics are created the three ways a topic
comes to be (auto-created by a producer's sends, ``boltmq admin topic create``
on every group or on named ones); routes merge the groups' queues; producers
spread over them; a consumer group of two members shares them; a message id
or key finds the message whichever group stored it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from boltmq import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
)
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.kernel.registry_client import RegistryClient
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.test_cli import one_line_error, run_cli
from tests.integration.two_groups import start_two_groups

GROUPS = ("broker-a", "broker-b")
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = start_two_groups(tmp_path_factory.mktemp("groups"), CLUSTER_REGISTRY_SETTINGS)
    yield started
    started.stop()


def registry_of(cluster: LocalCluster) -> str:
    assert cluster.registry is not None
    return cluster.registry.address


def route_groups(cluster: LocalCluster, topic: str) -> dict[str, int]:
    """Write queues per group of ``topic``'s route, as the registry merges it."""
    client = RegistryClient([registry_of(cluster)])
    try:
        route = client.get_route(topic)
    finally:
        client.close()
    assert {b.broker_name for b in route.brokers} == {q.broker_name for q in route.queues}
    return {q.broker_name: q.write_queue_nums for q in route.queues}


def cli(cluster: LocalCluster, *args: str) -> str:
    result = run_cli(*args, "--registry", registry_of(cluster))
    assert result.returncode == 0, f"{args}: {result.stderr}"
    return result.stdout


def test_every_group_writes_its_own_store_identity(cluster: LocalCluster) -> None:
    """Two stores on one machine: their message ids never share a host:port prefix."""
    assert set(cluster.groups) == set(GROUPS)
    dirs = {g: members[0].data_dir for g, members in cluster.groups.items()}
    assert dirs["broker-b"] == cluster.spec.data_dir / "broker-b" / "store"
    with Producer(registry_of(cluster), "identity-pg") as producer:
        cli(cluster, "admin", "topic", "create", "Ids", "--queues", "2")
        prefixes: dict[str, set[str]] = {}
        for i in range(16):
            r = producer.send(Message(topic="Ids", body=b"%d" % i))
            prefixes.setdefault(r.queue.broker_name, set()).add(r.msg_id[:16])  # host and port
    assert set(prefixes) == set(GROUPS)
    assert all(len(p) == 1 for p in prefixes.values())
    assert prefixes["broker-a"] != prefixes["broker-b"]


def test_an_auto_created_topic_reaches_every_group(cluster: LocalCluster) -> None:
    """The first send creates the topic on one group; the producer's next sends create
    it on the other, and from then on the route has both."""
    with Producer(registry_of(cluster), "auto-pg") as producer:
        results = [producer.send(Message(topic="AutoSpread", body=b"x")) for _ in range(24)]
    assert {r.queue.broker_name for r in results} == set(GROUPS)
    assert route_groups(cluster, "AutoSpread") == dict.fromkeys(GROUPS, 4)
    tail = {r.queue.broker_name for r in results[-8:]}
    assert tail == set(GROUPS)  # still spread once both have it


def test_admin_creates_on_every_group_or_the_named_ones(cluster: LocalCluster) -> None:
    out = cli(cluster, "admin", "topic", "create", "AdminBoth", "--queues", "3")
    assert out.splitlines() == [f"{g}: AdminBoth queues 3/3 perm RW" for g in GROUPS]
    assert route_groups(cluster, "AdminBoth") == dict.fromkeys(GROUPS, 3)
    route = cli(cluster, "admin", "topic", "route", "AdminBoth")
    assert "queues  broker-a: write 3" in route and "queues  broker-b: write 3" in route

    out = cli(cluster, "admin", "topic", "create", "OnlyB", "--groups", "broker-b")
    assert out.splitlines() == ["broker-b: OnlyB queues 8/8 perm RW"]
    assert route_groups(cluster, "OnlyB") == {"broker-b": 8}
    with Producer(registry_of(cluster), "only-b-pg") as producer:
        sent = [producer.send(Message(topic="OnlyB", body=b"b")) for _ in range(8)]
    assert {r.queue.broker_name for r in sent} == {"broker-b"}  # not spread: not auto-created

    out = cli(cluster, "admin", "topic", "update", "OnlyB", "--groups", "broker-a,broker-b")
    assert len(out.splitlines()) == 2
    assert route_groups(cluster, "OnlyB") == dict.fromkeys(GROUPS, 8)


@pytest.mark.parametrize(
    ("groups", "fragments"),
    [
        ("broker-x", ("no live master of 'broker-x'", "live groups: broker-a, broker-b")),
        ("broker-a,,broker-b", ("give broker group names separated by commas",)),
        ("", ("give broker group names separated by commas",)),
    ],
)
def test_admin_refuses_unknown_groups(
    cluster: LocalCluster, groups: str, fragments: tuple[str, ...]
) -> None:
    result = run_cli(
        "admin", "topic", "create", "Never", "--groups", groups, "--registry", registry_of(cluster)
    )
    one_line_error(result, "--groups", *fragments)
    listed = cli(cluster, "admin", "topic", "list")
    assert "Never" not in listed


def _stable_split(consumers: list[PushConsumer], queues: int) -> bool:
    """Every member owns a share, no queue twice, every queue owned."""
    shares = [set(c.assigned) for c in consumers]
    owned = set().union(*shares)
    return all(shares) and sum(map(len, shares)) == len(owned) == queues


def test_a_consumer_group_shares_both_groups_queues_exactly_once(cluster: LocalCluster) -> None:
    registry = registry_of(cluster)
    cli(cluster, "admin", "topic", "create", "Shared", "--queues", "4")
    got: list[list[ReceivedMessage]] = [[], []]

    def listener_of(index: int) -> Callable[[list[ReceivedMessage]], ConsumeResult]:
        def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            got[index].extend(messages)
            return ConsumeResult.SUCCESS

        return listener

    options = PushConsumerOptions(
        rebalance_interval_ms=300, long_poll_ms=1_000, commit_interval_ms=200
    )
    consumers = [
        PushConsumer(registry, "shared-cg", {"Shared": "*"}, listener_of(i), options=options)
        for i in range(2)
    ]
    for consumer in consumers:
        consumer.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not _stable_split(consumers, 8):
            assert time.monotonic() < deadline, [c.assigned for c in consumers]
            time.sleep(0.1)
        for consumer in consumers:
            assert {q.broker_name for q in consumer.assigned} <= set(GROUPS)
        assert {q.broker_name for c in consumers for q in c.assigned} == set(GROUPS)
        with Producer(registry, "shared-pg") as producer:
            sent = [producer.send(Message(topic="Shared", body=b"s%d" % i)) for i in range(64)]
        assert {r.queue.broker_name for r in sent} == set(GROUPS)
        while sum(map(len, got)) < 64:
            assert time.monotonic() < deadline + DEADLINE_S, sum(map(len, got))
            time.sleep(0.05)
        time.sleep(1.0)  # a duplicate would arrive within a few polls
    finally:
        for consumer in consumers:
            consumer.shutdown()
    bodies = [bytes(m.body) for share in got for m in share]
    assert sorted(bodies) == sorted(b"s%d" % i for i in range(64))  # each exactly once
    assert all(got), "both members consumed"
    assert {m.msg_id for share in got for m in share} == {r.msg_id for r in sent}


def test_lookup_by_id_and_by_key_finds_either_groups_message(cluster: LocalCluster) -> None:
    cli(cluster, "admin", "topic", "create", "Lookups", "--queues", "2")
    by_group: dict[str, tuple[str, str]] = {}
    with Producer(registry_of(cluster), "lookup-pg") as producer:
        for i in range(16):
            key = f"order-{i}"
            r = producer.send(Message(topic="Lookups", body=key.encode(), keys=[key]))
            by_group.setdefault(r.queue.broker_name, (r.msg_id, key))
    assert set(by_group) == set(GROUPS)
    for group, (msg_id, key) in by_group.items():
        found = cli(cluster, "admin", "message", "id", msg_id).splitlines()
        assert len(found) == 1, found  # the other group's store answers nothing
        assert found[0].startswith(f"{group}: {msg_id} Lookups/") and f"body=b'{key}'" in found[0]
        keyed = cli(cluster, "admin", "message", "key", "Lookups", key).splitlines()
        assert len(keyed) == 1 and keyed[0].startswith(f"{group}: {msg_id} "), keyed


def test_group_settings_change_on_every_groups_master(cluster: LocalCluster) -> None:
    """``admin group create|update|show|delete`` reach broker-a's and broker-b's masters."""
    created = cli(cluster, "admin", "group", "create", "cg-both", "--retry-max-times", "4")
    assert all(f"{name}: group cg-both" in created for name in GROUPS), created
    cli(cluster, "admin", "group", "update", "cg-both", "--consume-disable")
    shown = cli(cluster, "admin", "group", "show", "cg-both")
    for name in GROUPS:
        block = shown.split(f"{name}: group cg-both")[1].split(": group")[0]
        assert "consume-enable false" in block and "retry-max-times 4" in block, shown
    deleted = cli(cluster, "admin", "group", "delete", "cg-both")
    assert all(f"{name}: group cg-both deleted" in deleted for name in GROUPS), deleted
    gone = run_cli("admin", "group", "show", "cg-both", "--registry", registry_of(cluster))
    assert gone.returncode == 1 and "unknown on every master" in gone.stderr
