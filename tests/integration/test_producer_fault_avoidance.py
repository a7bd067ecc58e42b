"""A producer over two broker groups when one group's broker dies.

Two groups (a :class:`~boltmq.cli.dev.local_cluster.LocalCluster`, each
service its own process); broker-b's broker is killed with SIGKILL, so it
never unregisters and the registry (a long expiry here) keeps routing to it:
the hard case. Plain sends keep succeeding on broker-a, and after one failure
the producer avoids broker-b (:mod:`boltmq.fault_avoidance`) even without
retries; without the avoidance every other send fails. A sharded send whose
key's queue is on broker-b fails instead of moving to broker-a (that would
reorder the key).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, ProducerOptions
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.producer import SendError
from boltmq.wire.record import java_string_hash
from tests.integration.test_cli import run_cli
from tests.integration.two_groups import create_topic, start_two_groups

TOPIC = "Avoid"
SENDS = 40


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # a dead broker stays routed
    started = start_two_groups(tmp_path, ("broker_expiry_ms=120000",))
    try:
        create_topic(started, TOPIC, 4)
        yield started
    finally:
        started.stop()


def producer(cluster: LocalCluster, name: str, **options: int) -> Producer:
    assert cluster.registry is not None
    return Producer(
        cluster.registry.address,
        name,
        options=ProducerOptions(send_timeout_ms=3_000, **options),
    ).start()


def send_all(p: Producer, count: int) -> tuple[list[str], int]:
    """Broker group of each successful send, and how many failed."""
    groups, failed = [], 0
    for i in range(count):
        try:
            groups.append(p.send(Message(topic=TOPIC, body=b"%d" % i)).queue.broker_name)
        except SendError:
            failed += 1
    return groups, failed


def kill_broker_b(cluster: LocalCluster) -> None:
    broker = cluster.groups["broker-b"][0].broker
    assert broker is not None
    broker.kill()


def test_sends_avoid_a_dead_group_and_keep_succeeding_on_the_other(cluster: LocalCluster) -> None:
    before = producer(cluster, "before-pg")
    try:
        groups, failed = send_all(before, 16)
        assert failed == 0 and set(groups) == {"broker-a", "broker-b"}
        kill_broker_b(cluster)

        # With retries (the default): every send succeeds, on broker-a.
        groups, failed = send_all(before, SENDS)
        assert failed == 0 and set(groups) == {"broker-a"}
        assert before.avoidance.avoided() == ["broker-b"]
    finally:
        before.shutdown()

    # Without retries: one send pays for finding broker-b dead, the rest avoid it.
    lone = producer(cluster, "lone-pg", retry_times=0)
    try:
        groups, failed = send_all(lone, SENDS)
        assert failed <= 1 and len(groups) == SENDS - failed and set(groups) == {"broker-a"}
    finally:
        lone.shutdown()

    # The control: no avoidance, no retries: the round-robin keeps hitting broker-b.
    blind = producer(cluster, "blind-pg", retry_times=0, fault_avoidance_ms=0)
    try:
        groups, failed = send_all(blind, SENDS)
        assert failed >= SENDS // 4 and set(groups) == {"broker-a"}
        assert blind.avoidance.avoided() == []
    finally:
        blind.shutdown()


def test_a_sharded_send_fails_rather_than_move_to_another_group(cluster: LocalCluster) -> None:
    p = producer(cluster, "sharded-pg")
    try:
        queues = p.client.write_queues(TOPIC)
        assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
        kill_broker_b(cluster)
        for _ in range(16):  # round-robin reaches broker-b, which marks it avoided
            assert p.send(Message(topic=TOPIC, body=b"warm")).queue.broker_name == "broker-a"
        assert p.avoidance.avoided() == ["broker-b"]
        outcomes: dict[str, int] = {"broker-a": 0, "broker-b": 0}
        for i in range(8):  # (a send to broker-b waits once for its reconnect: few)
            key = f"order-{i}"
            home = queues[abs(java_string_hash(key)) % len(queues)]
            try:
                result = p.send(Message(topic=TOPIC, body=key.encode()), sharding_key=key)
            except SendError:
                assert home.broker_name == "broker-b", key
            else:
                assert (result.queue.broker_name, result.queue.queue_id) == (
                    home.broker_name,
                    home.queue_id,
                ), key  # its own queue, never another group's
            outcomes[home.broker_name] += 1
        assert all(outcomes.values()), outcomes  # both kinds of key were tried
    finally:
        p.shutdown()


def test_admin_cluster_shows_a_dead_member_without_failing(cluster: LocalCluster) -> None:
    """The registry still lists broker-b's killed broker: its row stays, its store's
    columns say ``-``, and a line names why, while broker-a's row is complete."""
    assert cluster.registry is not None
    kill_broker_b(cluster)
    result = run_cli("admin", "cluster", "--registry", cluster.registry.address)
    assert result.returncode == 0, result.stderr
    header, a_row, b_row, note = result.stdout.splitlines()
    assert header.split()[:2] == ["CLUSTER", "GROUP"]
    a, b = a_row.split(), b_row.split()
    assert a[1:4] == ["broker-a", "master", "0"] and a[5] == "ASYNC_MASTER" and a[7].isdigit()
    assert b[1:4] == ["broker-b", "master", "0"] and b[5] == "-" and b[7] == "-"
    broker = cluster.groups["broker-b"][0].broker
    assert broker is not None
    assert note.startswith(f"broker-b 0 at {broker.address} did not answer: UNAVAILABLE")
