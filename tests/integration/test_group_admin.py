"""Consumer-group settings changed live by ``boltmq admin group create|update|delete|show``.

Real registry, store and broker processes (short delay levels, so retries come
back within a second); the CLI runs as a process. What is shown: a settings
round trip with bad flags refused; consumption turned off stops delivery to a
running consumer (which logs the broker's refusal) and turning it on resumes
it; ``--retry-max-times 1`` dead-letters a failing message after one retry;
the %RETRY% topic follows ``--retry-queue-nums``; a group with live consumers
is deleted only with ``--force``; BROADCASTING is refused when disabled; a
non-admin account is refused every group admin call under the ACL; members
that subscribe differently are reported, and the one subscribing unlike the
group gets no queues, so nothing is silently filtered away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import Message, Producer, PushConsumer, PushConsumerOptions
from boltmq.v1 import broker_pb2
from tests.integration.sdk_fixtures import FAST, wait_until
from tests.integration.test_acl import ADMIN, ORDERS, AclCluster
from tests.integration.test_retry_delay import (
    DelayCluster,
    Deliveries,
    broker_stub,
    consumer,
    run_cli,
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DelayCluster]:
    started = DelayCluster(tmp_path)
    yield started
    started.stop()


@pytest.fixture
def producer(cluster: DelayCluster) -> Iterator[Producer]:
    with Producer(cluster.registry.address, "group-admin-pg") as made:
        yield made


def cli(cluster: DelayCluster, *args: str) -> str:
    """``boltmq admin group ARGS`` on the cluster; its output (it must succeed)."""
    done = run_cli("admin", "group", *args, "--registry", cluster.registry.address)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(cluster: DelayCluster, *args: str) -> str:
    """``boltmq admin group ARGS`` that must fail cleanly; its error text."""
    done = run_cli("admin", "group", *args, "--registry", cluster.registry.address)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr


def retry_queues(cluster: DelayCluster, group: str) -> tuple[int, int]:
    channel, stub = broker_stub(cluster)
    with channel:
        topics = stub.ListTopics(broker_pb2.ListTopicsRequest(), timeout=5).topics
    (retry,) = [t for t in topics if t.name == f"%RETRY%{group}"]
    return retry.read_queue_nums, retry.write_queue_nums


def test_settings_round_trip_and_bad_flags_refused(cluster: DelayCluster) -> None:
    out = cli(cluster, "create", "cg-admin", "--retry-max-times", "3", "--retry-queue-nums", "2")
    assert "broker-a: group cg-admin" in out or "group cg-admin" in out
    shown = cli(cluster, "show", "cg-admin")
    assert "retry-max-times 3" in shown and "retry-queue-nums 2" in shown
    assert "consume-enable true" in shown and "broadcast-enable true" in shown
    out = cli(cluster, "update", "cg-admin", "--consume-disable", "--broadcast-disable")
    shown = cli(cluster, "show", "cg-admin")
    assert "consume-enable false" in shown and "broadcast-enable false" in shown
    assert "retry-max-times 3" in shown  # settings not named are kept
    for args, error in [
        (("create", "cg-admin", "--retry-max-times", "0"), "retry_max_times: must be between"),
        (("create", "cg-admin", "--retry-queue-nums", "0"), "retry_queue_nums: must be between"),
        (("create", "cg-admin", "--broker-id", "2"), "broker_id: only 0 is accepted"),
        (("create", "cg-admin", "--which-broker-when-consume-slowly", "3"), "only 1"),
        (("create", "cg-admin", "--consume-from-min-disable"), "consume_from_min_enable"),
        (("create", "bad/name"), "group"),
        (("update", "cg-nobody", "--consume-enable"), "does not exist"),
        (("update", "cg-admin"), "name at least one setting"),
        (("delete", "cg-nobody"), "does not exist"),
        (("show", "cg-nobody"), "unknown"),
    ]:
        assert error in refused(cluster, *args), args
    assert "retry-max-times 3" in cli(cluster, "show", "cg-admin")  # refusals changed nothing
    assert "deleted" in cli(cluster, "delete", "cg-admin")
    assert "unknown" in refused(cluster, "show", "cg-admin")


def test_consume_disabled_stops_a_live_consumer_and_enabling_resumes(
    cluster: DelayCluster, producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cli(cluster, "create", "cg-switch")
    listener = Deliveries()
    producer.send(Message(topic="switched", body=b"before"))
    c = consumer(cluster, "cg-switch", "switched", listener)
    try:
        wait_until(lambda: listener.bodies()[b"before"] == 1, "delivery while enabled")
        cli(cluster, "update", "cg-switch", "--consume-disable")
        producer.send(Message(topic="switched", body=b"while-off"))
        wait_until(
            lambda: "consumeEnable is false" in caplog.text, "the consumer reporting the refusal"
        )
        time.sleep(2.0)  # several pull rounds (long_poll 2 s, back-off) deliver nothing
        assert listener.bodies()[b"while-off"] == 0
        cli(cluster, "update", "cg-switch", "--consume-enable")
        wait_until(lambda: listener.bodies()[b"while-off"] == 1, "delivery once re-enabled")
    finally:
        c.shutdown()


def test_retry_max_times_one_dead_letters_after_one_retry(
    cluster: DelayCluster, producer: Producer
) -> None:
    cli(cluster, "create", "cg-once", "--retry-max-times", "1", "--retry-queue-nums", "3")
    listener = Deliveries(lambda m: False)
    producer.send(Message(topic="fragile", body=b"poison"))
    c = consumer(cluster, "cg-once", "fragile", listener)
    try:

        def listed() -> bool:
            out = run_cli(
                "admin", "group", "dlq", "cg-once", "--registry", cluster.registry.address
            )
            return out.returncode == 0 and "1 dead letter" in out.stdout

        wait_until(listed, "the dead letter after one retry")
        assert [s["reconsume_times"] for s in listener.of(b"poison")] == [0, 1]
        assert retry_queues(cluster, "cg-once") == (3, 3)
        cli(cluster, "update", "cg-once", "--retry-queue-nums", "2")
        assert retry_queues(cluster, "cg-once") == (3, 2)  # read queues never shrink
    finally:
        c.shutdown()


def test_delete_refuses_live_consumers_without_force(
    cluster: DelayCluster, producer: Producer
) -> None:
    cli(cluster, "create", "cg-busy")
    producer.send(Message(topic="busy", body=b"x"))
    c = consumer(cluster, "cg-busy", "busy", Deliveries())
    try:
        wait_until(lambda: "member " in cli(cluster, "show", "cg-busy"), "the live member")
        assert "live consumer" in refused(cluster, "delete", "cg-busy")
        assert "cg-busy" in cli(cluster, "show", "cg-busy")
        channel, stub = broker_stub(cluster)
        with channel, pytest.raises(grpc.RpcError) as caught:  # the broker refuses too
            stub.DeleteGroup(broker_pb2.DeleteGroupRequest(group="cg-busy"), timeout=5)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "deleted" in cli(cluster, "delete", "cg-busy", "--force")
    finally:
        c.shutdown()


def test_broadcasting_refused_when_the_group_disables_it(cluster: DelayCluster) -> None:
    cli(cluster, "create", "cg-flat", "--broadcast-disable")
    beat = broker_pb2.HeartbeatRequest(
        client_id="10.0.0.1@broadcaster",
        consumer_groups=[broker_pb2.ConsumerGroupHeartbeat(group="cg-flat", model="BROADCASTING")],
    )
    channel, stub = broker_stub(cluster)
    with channel:
        with pytest.raises(grpc.RpcError) as caught:
            stub.Heartbeat(beat, timeout=5)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "consumeBroadcastEnable is false" in str(caught.value.details())
        beat.consumer_groups[0].model = "CLUSTERING"
        stub.Heartbeat(beat, timeout=5)


def test_members_subscribing_differently_are_reported_and_not_given_queues(
    cluster: DelayCluster, producer: Producer
) -> None:
    for topic in ("split", "other"):
        producer.send(Message(topic=topic, body=b"x", tags="A"))
    alike, unlike = Deliveries(), Deliveries()
    first = consumer(cluster, "cg-split", "split", alike)
    wait_until(lambda: len(first.assigned) == 4, "the first member to own the queues")
    second = PushConsumer(
        cluster.registry.address, "cg-split", {"split": "B", "other": "*"}, unlike,
        options=PushConsumerOptions(**FAST),
    ).start()  # fmt: skip
    made = [first, second]
    try:
        wait_until(
            lambda: "INCONSISTENT" in cli(cluster, "show", "cg-split"), "the inconsistency report"
        )
        shown = cli(cluster, "show", "cg-split")
        members = [line for line in shown.splitlines() if line.strip().startswith("member ")]
        assert len(members) == 2, shown
        # a tie: the member that came first keeps the queues; the other is excluded
        assert any("split:*" in m and "other" not in m and "EXCLUDED" not in m for m in members)
        assert any("split:B" in m and "other:*" in m and "EXCLUDED" in m for m in members)
        time.sleep(0.5)  # a few rebalances of both
        assert second.assigned == [] and len(first.assigned) == 4
        sent = [f"s-{n}".encode() for n in range(8)]
        for body in sent:  # tag A: the excluded member's filter (B) would have dropped them
            producer.send(Message(topic="split", body=body, tags="A"))
        wait_until(lambda: set(sent) <= set(alike.bodies()), "every message to the group")
        assert not unlike.bodies()
        # a third member subscribing like the second: now most do, and those two share
        made.append(
            PushConsumer(
                cluster.registry.address, "cg-split", {"split": "B", "other": "*"}, unlike,
                options=PushConsumerOptions(**FAST),
            ).start()
        )  # fmt: skip
        wait_until(
            lambda: (
                first.assigned == []
                and sorted(q.queue_id for c in made[1:] for q in c.assigned if q.topic == "split")
                == [0, 1, 2, 3]
            ),
            "the majority to take the queues",
        )
    finally:
        for c in made:
            c.shutdown()


@pytest.fixture
def acl_cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path)
    yield started
    started.stop()


def test_group_admin_calls_are_admin_only_under_the_acl(acl_cluster: AclCluster) -> None:
    calls = [
        ("UpsertGroup", broker_pb2.UpsertGroupRequest(group="cg-acl", consume_enable=False)),
        ("GetGroup", broker_pb2.GetGroupRequest(group="cg-acl")),
        ("DeleteGroup", broker_pb2.DeleteGroupRequest(group="cg-acl", force=True)),
    ]
    for method, request in calls:
        with pytest.raises(grpc.RpcError) as caught:
            getattr(acl_cluster.stub(ORDERS), method)(request, timeout=5)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
    admin = acl_cluster.stub(ADMIN)
    assert admin.UpsertGroup(calls[0][1], timeout=5).settings.consume_enable is False
    assert admin.GetGroup(calls[1][1], timeout=5).settings.group == "cg-acl"
    admin.DeleteGroup(calls[2][1], timeout=5)
