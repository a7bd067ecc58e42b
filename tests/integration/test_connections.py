"""``boltmq admin connections producer|consumer GROUP`` against real processes.

A LocalCluster of two broker groups (registry, stores and brokers as
processes) and the CLI as a process. What is shown: a started Producer
heartbeats its group to both masters, which list it with the address they saw,
language PYTHON, the package's version and since when (a TransactionProducer
before its first send, to the masters of its check streams); a PushConsumer is
listed with its model and subscription; a shut-down producer is gone at once
(it unregisters) and one that stops heartbeating is dropped after the
broker's ``client_expiry_ms``; bad group names, kinds and unknown groups are
refused with clear errors; the call is admin-only under the ACL.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import boltmq
from boltmq import LocalTransactionState, Message, Producer, ProducerOptions, TransactionProducer
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.v1 import broker_pb2, message_pb2
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import Collector
from tests.integration.test_acl import ADMIN, ORDERS, AclCluster
from tests.integration.test_cli import run_cli
from tests.integration.two_groups import (
    cli,
    create_topic,
    registry_of,
    send_batch,
    start_consumer,
    two_groups,  # noqa: F401 - the module's cluster
)
from tests.waiting import wait_until

TOPIC = "conn-orders"
LINE = re.compile(
    r"^  (?P<id>\S+)  127\.0\.0\.1:\d+  PYTHON  (?P<version>\S+)  "
    r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ(?P<rest>.*)$"
)


def clients_of(shown: str) -> dict[str, list[re.Match[str]]]:
    """Broker name -> the client lines listed under it."""
    listed: dict[str, list[re.Match[str]]] = {}
    current = ""
    for line in shown.splitlines():
        if not line.startswith(" "):
            current = line.split(":", 1)[0]
            listed[current] = []
        elif (match := LINE.match(line)) is not None:
            listed[current].append(match)
    return listed


def listed_on_both(cluster: LocalCluster, kind: str, group: str) -> list[re.Match[str]]:
    """Wait until ``admin connections KIND GROUP`` lists one client under each master;
    return those two lines, from the listing that showed them."""
    shown: list[str] = []

    def one_each() -> bool:
        answer = cli(cluster, "connections", kind, group)
        shown[:] = [answer.stdout]
        listed = clients_of(answer.stdout) if answer.returncode == 0 else {}
        return sorted(listed) == ["broker-a", "broker-b"] and all(
            len(v) == 1 for v in listed.values()
        )

    wait_until(one_each, f"the {kind} group {group} listed once on both masters")
    lines = [line for lines in clients_of(shown[0]).values() for line in lines]
    assert len(lines) == 2, shown[0]
    return lines


def test_producers_and_consumers_are_listed_on_every_master(two_groups: LocalCluster) -> None:  # noqa: F811
    create_topic(two_groups, TOPIC)
    producer = Producer(registry_of(two_groups), "conn-pg").start([TOPIC])
    collector = Collector()
    consumer = start_consumer(two_groups, "conn-cg", TOPIC, collector)
    try:
        send_batch(producer, TOPIC, "c", 4)

        for line in listed_on_both(two_groups, "producer", "conn-pg"):
            assert line["id"] == producer.client.client_id
            assert line["version"] == boltmq.__version__
        for line in listed_on_both(two_groups, "consumer", "conn-cg"):
            assert line["id"] == consumer.client.client_id
            assert line["rest"] == f"  CLUSTERING  %RETRY%conn-cg:*, {TOPIC}:*"
    finally:
        consumer.shutdown()
        producer.shutdown()
    gone = cli(two_groups, "connections", "producer", "conn-pg")
    assert gone.returncode == 1
    assert "producer group 'conn-pg' has no live client on any master" in gone.stderr


class _Commit:
    def check_local_transaction(self, msg: message_pb2.MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_a_transaction_producer_is_listed_before_it_sends(two_groups: LocalCluster) -> None:  # noqa: F811
    producer = TransactionProducer(registry_of(two_groups), "conn-tx", _Commit()).start()
    try:
        # the masters of its check streams, heartbeated before any send
        for line in listed_on_both(two_groups, "producer", "conn-tx"):
            assert line["id"] == producer.producer.client.client_id
    finally:
        producer.shutdown()


def test_bad_inputs_are_refused(two_groups: LocalCluster) -> None:  # noqa: F811
    bad_name = cli(two_groups, "connections", "producer", "bad group!")
    assert bad_name.returncode == 1
    assert "GetConnections" in bad_name.stderr and "group" in bad_name.stderr
    bad_kind = cli(two_groups, "connections", "sender", "conn-pg")
    assert bad_kind.returncode == 2 and "No such command 'sender'" in bad_kind.stderr
    missing = run_cli("admin", "connections", "consumer", "--registry", registry_of(two_groups))
    assert missing.returncode == 2 and "Missing argument 'NAME'" in missing.stderr
    unknown = cli(two_groups, "connections", "consumer", "nobody-here")
    assert unknown.returncode == 1
    assert "consumer group 'nobody-here' has no live client on any master" in unknown.stderr


@pytest.fixture
def short_expiry(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(tmp_path, ("client_expiry_ms=1500", "client_scan_interval_ms=200"))
    yield started
    started.stop()


def test_a_silent_producer_expires(short_expiry: Cluster) -> None:
    registry = short_expiry.registry.address
    quiet = ProducerOptions(heartbeat_interval_ms=3_600_000)  # one heartbeat, then silence
    producer = Producer(registry, "conn-quiet", options=quiet).start()
    try:
        producer.send(Message(topic="conn-expiry", body=b"x"))

        def count() -> int:
            shown = run_cli(
                "admin", "connections", "producer", "conn-quiet", "--registry", registry
            )
            return sum(len(v) for v in clients_of(shown.stdout).values())

        wait_until(lambda: count() == 1, "the producer's first heartbeat")
        time.sleep(2.0)  # past client_expiry_ms without a heartbeat
        assert count() == 0
    finally:
        producer.shutdown()


@pytest.fixture
def acl_cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path)
    yield started
    started.stop()


def test_connections_are_admin_only_under_the_acl(acl_cluster: AclCluster) -> None:
    request = broker_pb2.GetConnectionsRequest(group="orders-consumers", kind="consumer")
    with pytest.raises(grpc.RpcError) as caught:
        acl_cluster.stub(ORDERS).GetConnections(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert list(acl_cluster.stub(ADMIN).GetConnections(request, timeout=5).connections) == []
    bad = broker_pb2.GetConnectionsRequest(group="orders-consumers", kind="sender")
    with pytest.raises(grpc.RpcError) as caught:
        acl_cluster.stub(ADMIN).GetConnections(bad, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "kind: 'producer' or 'consumer'" in (caught.value.details() or "")
