"""The official RocketMQ 5 Python client across a master failover (docs/rocketmq-clients.md).

Two broker groups, a replica each, SYNC_MASTER, the etcd controller (a real etcd, the
``etcd`` fixture): the official Producer sends at a steady pace while broker-a's master
(its store, HA service and broker) is killed with SIGKILL; the controller elects the
replica. The client keeps sending without a failed send (its retry moves to the next queue
of its cached route, which QueryRoute interleaves across groups), the new master appears
in QueryRoute and takes sends after the client's route refresh, and every acknowledged
message is stored (read back with BoltMQ's PullConsumer) and is received afterwards by
the official SimpleConsumer, broker-a's from its new master. After a failover, FIFO send
and ordered consumption, a delayed send and transactions (commit, rollback) work on both
groups, with the topics and the orderly group the replica copied, and so does a
tag-filtered PushConsumer whose failed messages come back. Waits are for a state
(bounded), never a timing assertion.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.cli.etcd_server import EtcdServer
from boltmq.kernel.channels import sync_channel
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2, service_pb2_grpc
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.broker_fixtures import upsert
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.rocketmq.official_client import (
    RMQ_PYTHON,
    RUN_TIMEOUT_S,
    SCRIPTS,
    consumptions,
    needs_official_client,
    of,
    run_client,
)
from tests.integration.sdk_fixtures import pull_everything
from tests.integration.test_failover import (
    BROKER_SETTINGS,
    HA_SETTINGS,
    STORE_SETTINGS,
    store_info,
    wait_for,
)

TOPIC = "RmqFailover"
SEND_S = 13
"""How long the official producer sends: the kill comes after its first messages, and the
client's first scheduled route refresh (10 s after its start, then every 30 s: see the doc)
falls inside."""
LEASE_MS = 2000
DRAIN_S = 120
"""The SimpleConsumer's bound for receiving everything: it picks a random queue for each
receive, and one on the group that holds no more messages waits its whole long poll (2 s;
docs/rocketmq-clients.md), so it takes batches of 32 to need few receives."""


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdServer) -> Iterator[LocalCluster]:
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        groups=2,
        master_role="SYNC_MASTER",
        store_settings=STORE_SETTINGS,
        broker_settings=BROKER_SETTINGS,
        ha_settings=(
            *HA_SETTINGS,
            f"controller_endpoints={etcd.endpoint}",
            f"controller_lease_ms={LEASE_MS}",
        ),
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
    )
    local = LocalCluster(spec).start()
    try:
        yield local
    finally:
        local.stop()


def route_addresses(broker: str, topic: str = TOPIC) -> set[str]:
    """host:port of every queue's endpoint in ``topic``'s route, as ``broker`` answers it."""
    stub = service_pb2_grpc.MessagingServiceStub(sync_channel(broker))
    route = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=v2.Resource(name=topic)), timeout=5)
    assert route.status.code == v2.OK, route.status
    return {
        f"{a.host}:{a.port}" for q in route.message_queues for a in q.broker.endpoints.addresses
    }


def start_producer(endpoints: str, events: list[dict[str, Any]]) -> subprocess.Popen[str]:
    """The official producer's ``paced`` run; its events appended to ``events`` as read."""
    env = {**os.environ, "HOME": os.environ.get("TMPDIR", "/tmp")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        [str(RMQ_PYTHON), str(SCRIPTS / "rmq_producer.py"), endpoints, "paced", TOPIC, str(SEND_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=SCRIPTS,
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                events.append(json.loads(line))

    threading.Thread(target=read, daemon=True).start()
    return proc


def wait_for_masters(cluster: LocalCluster, topic: str, *more: str) -> None:
    """Both groups' first members elected, with the topics on both groups (the replicas
    copy them) and broker-a's master in ``topic``'s QueryRoute."""
    for group in cluster.groups.values():
        wait_for(lambda g=group: store_info(g[0].store.address).role == "MASTER", "elected")
        assert group[0].broker is not None
        for name in (topic, *more):
            upsert(broker_pb2_grpc.BrokerServiceStub(sync_channel(group[0].broker.address)), name)
    old_master, other = cluster.groups["broker-a"][0], cluster.groups["broker-b"][0]
    assert old_master.broker and other.broker
    wait_for(
        lambda: old_master.broker.address in route_addresses(other.broker.address, topic), "route"
    )


def kill_broker_a_master(cluster: LocalCluster, topic: str) -> None:
    """SIGKILL the whole master member of broker-a (broker, HA service, store), then wait
    until its replica is elected with a new epoch and is broker-a's master in ``topic``'s
    QueryRoute."""
    old_master, replica = cluster.groups["broker-a"]
    other, _ = cluster.groups["broker-b"]
    assert old_master.broker and replica.broker and other.broker
    first_epoch = store_info(old_master.store.address).epoch
    for process in (old_master.broker, old_master.ha, old_master.store):
        assert process is not None
        process.kill()
    wait_for(lambda: store_info(replica.store.address).role == "MASTER", "the replica is elected")
    assert store_info(replica.store.address).epoch > first_epoch
    wait_for(
        lambda: replica.broker.address in route_addresses(other.broker.address, topic),
        "the new master is in QueryRoute",
    )
    assert old_master.broker.address not in route_addresses(other.broker.address, topic)


def controller_notes(cluster: LocalCluster) -> list[str]:
    """Every HA service's controller log lines (elections, fences), for a failure's message:
    a master that fenced itself shows here with its reason."""
    return [
        f"{path.name}: {line}"
        for path in sorted(cluster.log_dir.glob("ha-*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if "services.ha.controller" in line
    ]


def live_brokers(cluster: LocalCluster) -> str:
    """The official client's access points: every live broker, ``;``-separated."""
    return ";".join(
        m.broker.address
        for g in cluster.groups.values()
        for m in g
        if m.broker and m.broker.alive()
    )


@needs_official_client
def test_the_official_client_sends_across_a_killed_master_and_every_acked_message_is_received(
    cluster: LocalCluster,
) -> None:
    old_master, replica = cluster.groups["broker-a"]
    assert old_master.broker and replica.broker
    wait_for_masters(cluster, TOPIC)

    # Every broker is an access point (the first QueryRoute goes to one that answers).
    events: list[dict[str, Any]] = []
    producer = start_producer(live_brokers(cluster), events)
    wait_for(lambda: len(of(events, "sent")) >= 20, "the official producer sends")
    kill_broker_a_master(cluster, TOPIC)
    assert producer.wait(timeout=RUN_TIMEOUT_S) == 0

    sent, failed = of(events, "sent"), of(events, "failed")
    assert sent and sent[-1]["t"] > SEND_S - 2  # it went on sending to the end
    assert failed == [], controller_notes(cluster)  # each retry went to broker-b
    # After its route refresh the client sends to broker-a's new master too.
    assert replica.broker.address in {s["at"] for s in sent}
    assert old_master.broker.address in {s["at"] for s in sent}  # before the kill
    stored = {bytes(m.body).decode() for m in pull_everything(cluster, TOPIC)}  # type: ignore[arg-type]
    assert {s["body"] for s in sent} <= stored  # nothing acknowledged is lost

    drained = run_client(
        "rmq_consumer.py",
        live_brokers(cluster),
        "drain",
        "RmqFailoverDrain",
        TOPIC,
        str(len(stored)),
        str(DRAIN_S),
        "32",
    )
    assert of(drained, "error") == []
    received = {e["body"] for e in of(drained, "received")}
    assert received == stored  # the new master serves broker-a's messages by POP


@needs_official_client
def test_fifo_delay_and_transactions_work_on_both_groups_after_a_failover(
    cluster: LocalCluster,
) -> None:
    topics = ("RmqAfterFifo", "RmqAfterDelay", "RmqAfterTx", "RmqAfterPush")
    wait_for_masters(cluster, *topics)
    for group in cluster.groups.values():  # an orderly group on both groups
        master, replica = group
        assert master.broker and replica.broker
        broker_pb2_grpc.BrokerServiceStub(sync_channel(master.broker.address)).UpsertGroup(
            broker_pb2.UpsertGroupRequest(group="rmq-after-fifo", consume_message_orderly=True),
            timeout=10,
        )
        copy = broker_pb2_grpc.BrokerServiceStub(sync_channel(replica.broker.address))
        wait_for(  # metadata reaches a replica asynchronously
            lambda c=copy: (
                set(topics)
                <= {t.name for t in c.ListTopics(broker_pb2.ListTopicsRequest(), timeout=5).topics}
                and c.GetGroup(
                    broker_pb2.GetGroupRequest(group="rmq-after-fifo"), timeout=5
                ).settings.consume_message_orderly
            ),
            "the replica has the topics and the group",
        )
    kill_broker_a_master(cluster, "RmqAfterFifo")
    endpoints = live_brokers(cluster)

    # FIFO: 3 message groups over both broker groups, consumed in send order per group.
    sent = of(run_client("rmq_producer.py", endpoints, "fifo", "RmqAfterFifo", "3", "12"), "sent")
    assert len(sent) == 12
    drained = run_client(
        "rmq_consumer.py", endpoints, "drain", "rmq-after-fifo", "RmqAfterFifo", "12", "60"
    )
    received = of(drained, "received")
    assert len(received) == 12
    for message_group in ("g0", "g1", "g2"):
        bodies = [r["body"] for r in received if r["group"] == message_group]
        assert bodies == [
            f"{message_group}-{i}" for i in range(12) if i % 3 == int(message_group[1])
        ]

    # Delay: stored in its topic only at its delivery time (by whichever group took it).
    (delayed,) = of(run_client("rmq_producer.py", endpoints, "delay", "RmqAfterDelay", "3"), "sent")
    assert pull_everything(cluster, "RmqAfterDelay") == []  # type: ignore[arg-type]
    wait_for(lambda: len(pull_everything(cluster, "RmqAfterDelay")) == 1, "the delayed message")  # type: ignore[arg-type]
    (stored,) = pull_everything(cluster, "RmqAfterDelay")  # type: ignore[arg-type]
    assert stored.unique_id == delayed["message_id"]

    # Transactions: a commit is stored, a rollback is not.
    assert of(
        run_client("rmq_producer.py", endpoints, "transaction", "RmqAfterTx", "commit"), "committed"
    )
    assert of(
        run_client("rmq_producer.py", endpoints, "transaction", "RmqAfterTx", "rollback"),
        "rolled_back",
    )
    bodies = [bytes(m.body).decode() for m in pull_everything(cluster, "RmqAfterTx")]  # type: ignore[arg-type]
    assert bodies == ["tx-commit"]

    # A tag-filtered PushConsumer: a failed message comes back, from both groups.
    sent = of(
        run_client("rmq_producer.py", endpoints, "tagged", "RmqAfterPush", "8", "a,b"), "sent"
    )
    events = run_client(
        "rmq_push_consumer.py",
        endpoints,
        "rmq-after-push",
        "RmqAfterPush",
        "4",
        "60",
        "fail_first",
        "a",
    )
    consumed = of(events, "consumed")
    for message in sent:
        mine = consumptions(consumed, message["message_id"])
        assert mine == ([(1, "FAILURE"), (2, "SUCCESS")] if message["tag"] == "a" else [])
