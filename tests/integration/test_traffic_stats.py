"""``boltmq admin stats topic|group`` against real processes.

A LocalCluster of two broker groups (registry, stores and brokers as
processes) and the CLI as a process. What is shown: N messages sent over both
groups' queues and consumed by one group are counted N produced and N
consumed for the topic (and its group's row), and N consumed for the group
(and its topic's row), in the last minute and the last hour, summed over both
masters; bad and unknown names are refused with clear errors; the RPC is
admin-only under the ACL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import Producer
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.sdk_fixtures import Collector
from tests.integration.test_acl import ADMIN, ORDERS, AclCluster
from tests.integration.two_groups import (
    cli,
    create_topic,
    registry_of,
    send_batch,
    start_consumer,
    two_groups,  # noqa: F401 - the module's cluster
)
from tests.waiting import wait_until

TOPIC = "stats-orders"
GROUP = "stats-billing"
N = 24
WINDOWS = re.compile(r"last minute (\d+) \([\d.]+/s\)  last hour (\d+) \([\d.]+/s\)$")


def broker_stubs(cluster: LocalCluster) -> list[broker_pb2_grpc.BrokerServiceStub]:
    """A stub on every group's master broker (channels closed with the process)."""
    return [
        broker_pb2_grpc.BrokerServiceStub(sync_channel(members[0].broker.address))
        for members in cluster.groups.values()
        if members[0].broker is not None
    ]


def windows(shown: str, label: str) -> tuple[int, int] | None:
    """(last minute, last hour) of the line starting with ``label``, or None."""
    for line in shown.splitlines():
        if line.startswith(label) and (match := WINDOWS.search(line)) is not None:
            return int(match[1]), int(match[2])
    return None


def test_produced_and_consumed_counts_over_both_masters(two_groups: LocalCluster) -> None:  # noqa: F811
    create_topic(two_groups, TOPIC)
    collector = Collector()
    consumer = start_consumer(two_groups, GROUP, TOPIC, collector)
    try:
        with Producer(registry_of(two_groups), "stats-pg") as producer:
            send_batch(producer, TOPIC, "s", N)
        wait_until(lambda: len(collector.bodies()) >= N, "every message consumed")

        def topic_counts() -> dict[str, tuple[int, int] | None]:
            shown = cli(two_groups, "stats", "topic", TOPIC).stdout
            return {
                "produced": windows(shown, "  produced"),
                "consumed": windows(shown, "  consumed"),
                "group": windows(shown, f"  group {GROUP}  consumed"),
            }

        everything = {key: (N, N) for key in ("produced", "consumed", "group")}
        wait_until(lambda: topic_counts() == everything, "the topic's stats")
        # the whole broker (broker: true): this topic is one part of each master's answer
        whole = [
            two_groups_stub.GetTrafficStats(
                broker_pb2.GetTrafficStatsRequest(broker=True), timeout=5
            )
            for two_groups_stub in broker_stubs(two_groups)
        ]
        assert sum(w.produced.last_minute for w in whole) >= N
        parts = [p.consumed for w in whole for p in w.parts if p.name == TOPIC]
        assert (sum(c.last_minute for c in parts), sum(c.last_hour for c in parts)) == (N, N)
        shown = cli(two_groups, "stats", "topic", TOPIC).stdout
        assert shown.startswith(f"topic {TOPIC} on broker-a, broker-b\n")

        group_shown = cli(two_groups, "stats", "group", GROUP)
        assert group_shown.returncode == 0, group_shown.stderr
        assert group_shown.stdout.startswith(f"group {GROUP} on broker-a, broker-b\n")
        assert windows(group_shown.stdout, "  consumed") == (N, N)
        assert windows(group_shown.stdout, f"  topic {TOPIC}  consumed") == (N, N)
        assert "produced" not in group_shown.stdout
    finally:
        consumer.shutdown()


def test_bad_and_unknown_names_are_refused(two_groups: LocalCluster) -> None:  # noqa: F811
    bad = cli(two_groups, "stats", "topic", "bad topic!")
    assert bad.returncode == 1
    assert "GetTrafficStats on broker-a: INVALID_ARGUMENT: topic" in bad.stderr
    unknown = cli(two_groups, "stats", "topic", "stats-nowhere")
    assert unknown.returncode == 1
    assert "topic 'stats-nowhere' is unknown on every master" in unknown.stderr
    unknown_group = cli(two_groups, "stats", "group", "stats-nobody")
    assert unknown_group.returncode == 1
    assert "group 'stats-nobody' is unknown on every master" in unknown_group.stderr
    wrong = cli(two_groups, "stats", "queue", TOPIC)
    assert wrong.returncode == 2 and "No such command 'queue'" in wrong.stderr


@pytest.fixture
def acl_cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path)
    yield started
    started.stop()


def test_traffic_stats_are_admin_only_under_the_acl(acl_cluster: AclCluster) -> None:
    request = broker_pb2.GetTrafficStatsRequest(topic="orders")
    with pytest.raises(grpc.RpcError) as caught:
        acl_cluster.stub(ORDERS).GetTrafficStats(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as caught:  # past the ACL: no such topic here
        acl_cluster.stub(ADMIN).GetTrafficStats(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "topic: 'orders' is unknown here" in (caught.value.details() or "")
    whole = broker_pb2.GetTrafficStatsRequest(broker=True)
    with pytest.raises(grpc.RpcError) as caught:
        acl_cluster.stub(ORDERS).GetTrafficStats(whole, timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    nothing_yet = acl_cluster.stub(ADMIN).GetTrafficStats(whole, timeout=5)
    assert nothing_yet.produced.last_hour == 0 and list(nothing_yet.parts) == []
    with pytest.raises(grpc.RpcError) as caught:
        acl_cluster.stub(ADMIN).GetTrafficStats(broker_pb2.GetTrafficStatsRequest(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "of: name a topic or a group (or broker: true)" in (caught.value.details() or "")
