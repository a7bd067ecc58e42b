"""A broker group with a replica, end to end: SYNC_MASTER, failover, reads from the replica.

Every process is real (``boltmq serve registry|store|ha|broker`` started by
:class:`boltmq.cli.dev.local_cluster.LocalCluster`, as ``boltmq dev --replicas 1``
does), and clients are the SDK and the CLI. Waits are for a state to be
reached (bounded), never a timing assertion.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import Message, Producer, ProducerOptions, PullConsumer
from boltmq.cli.dev.local_cluster import BROKER_NAME, ClusterSpec, LocalCluster
from boltmq.client import MessageQueue
from boltmq.kernel.channels import sync_channel
from boltmq.message import SendStatus
from boltmq.producer import SendError
from boltmq.pull_consumer import PullError, PullResult
from boltmq.v1 import broker_pb2, broker_pb2_grpc, store_pb2, store_pb2_grpc
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)

TOPIC = "Failover"
QUEUES = 4
WAIT_S = 30.0
PULL_ATTEMPTS = 5
STORE_SETTINGS = (*CLUSTER_STORE_SETTINGS, "slave_timeout_ms=1000")
BROKER_SETTINGS = (
    *CLUSTER_BROKER_SETTINGS,
    "role_check_interval_ms=200",
    "metadata_sync_interval_ms=300",
    "default_topic_queue_nums=4",
)
HA_SETTINGS = (
    "heartbeat_interval_ms=200",
    "role_check_interval_ms=200",
    "reconnect_min_ms=50",
    "reconnect_max_ms=300",
    "housekeeping_interval_ms=3000",
)


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (grpc.RpcError, OSError):
            pass  # a process that is (re)starting
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


def store_info(address: str) -> store_pb2.StoreInfo:
    with sync_channel(address) as channel:
        info: store_pb2.StoreInfo = store_pb2_grpc.StoreServiceStub(channel).GetStoreInfo(
            store_pb2.GetStoreInfoRequest(), timeout=5
        )
        return info


def commitlog(address: str, start: int) -> bytes:
    with sync_channel(address) as channel:
        chunks = store_pb2_grpc.StoreServiceStub(channel).ReadCommitLog(
            store_pb2.ReadCommitLogRequest(offset=start), timeout=30
        )
        return b"".join(c.data for c in chunks)


def read_all(registry: str, group: str) -> list[bytes]:
    """Every message of TOPIC, queue by queue from offset 0 (through the SDK's read routing).

    A pull that fails is tried again, as a consumer does: the SDK moves reads
    to a replica once the master has failed to answer.
    """
    consumer = PullConsumer(registry, group, rpc_timeout_ms=2000)
    bodies: list[bytes] = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            result = _pull_retrying(consumer, MessageQueue(TOPIC, BROKER_NAME, queue_id), offset)
            if not result.messages:
                break
            bodies += [bytes(m.body) for m in result.messages]
            offset = result.next_begin_offset
    return bodies


def _pull_retrying(consumer: PullConsumer, queue: MessageQueue, offset: int) -> PullResult:
    for _ in range(PULL_ATTEMPTS - 1):
        try:
            return consumer.pull(queue, offset, 256)
        except PullError:
            continue
    return consumer.pull(queue, offset, 256)


def start_cluster(tmp_path: Path, master_role: str, *broker_settings: str) -> LocalCluster:
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        master_role=master_role,
        store_settings=STORE_SETTINGS,
        broker_settings=(*BROKER_SETTINGS, *broker_settings),
        ha_settings=HA_SETTINGS,
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
    )
    return LocalCluster(spec).start()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = start_cluster(tmp_path, "SYNC_MASTER")
    try:
        yield local
    finally:
        local.stop()


def registry_of(cluster: LocalCluster) -> str:
    assert cluster.registry is not None
    return cluster.registry.address


def replica_connected(cluster: LocalCluster) -> bool:
    return bool(store_info(cluster.members[0].store.address).replicas)


def test_sync_master_acknowledges_after_the_replica_and_says_when_it_cannot(
    cluster: LocalCluster,
) -> None:
    wait_for(lambda: replica_connected(cluster), "the replica reports to the master")
    master, replica = cluster.members
    with Producer(
        registry_of(cluster), group="pg", options=ProducerOptions(retry_times=0)
    ) as producer:
        ok = producer.send(Message(topic=TOPIC, body=b"replicated"))
        assert ok.status is SendStatus.SEND_OK
        # Acknowledged means the replica has it already.
        assert store_info(replica.store.address).commitlog_max_offset >= ok.commitlog_offset + 1
        replica.store.pause()  # the replica's HA cannot append: its acks stop
        try:
            late = producer.send(Message(topic=TOPIC, body=b"no ack in time"))
        finally:
            replica.store.resume()
        assert late.status is SendStatus.FLUSH_SLAVE_TIMEOUT
        wait_for(
            lambda: any(
                r.acked_offset > late.commitlog_offset
                for r in store_info(master.store.address).replicas
            ),
            "the resumed replica acknowledges the late message",
        )
        assert replica.ha is not None
        replica.ha.stop()  # the replica's stream ends: the master forgets it
        wait_for(lambda: not replica_connected(cluster), "the master forgets the replica")
        alone = producer.send(Message(topic=TOPIC, body=b"no replica"))
        assert alone.status is SendStatus.SLAVE_NOT_AVAILABLE
    # All three are stored on the master, but consumers see only what the replica has
    # (the late one, once the resumed replica caught up): the confirm offset, docs/ha.md.
    stored = store_info(master.store.address).commitlog_max_offset
    assert stored > alone.commitlog_offset >= 0
    assert sorted(read_all(registry_of(cluster), "cg-sync")) == [b"no ack in time", b"replicated"]
    assert master.store.alive()


def produce_until_failure(registry: str, acked: list[bytes], stop: threading.Event) -> None:
    """Send one by one (SYNC_MASTER); keep what was acknowledged SEND_OK."""
    with Producer(
        registry, group="pg-load", options=ProducerOptions(retry_times=0, send_timeout_ms=2000)
    ) as producer:
        i = 0
        while not stop.is_set():
            body = f"m{i:06d}".encode()
            try:
                result = producer.send(Message(topic=TOPIC, body=body))
            except SendError:
                return  # the master is gone
            if result.status is SendStatus.SEND_OK:
                acked.append(body)
            i += 1


def promote_with_cli(registry: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "boltmq.cli",
            "admin",
            "broker",
            "promote",
            BROKER_NAME,
            "--registry",
            registry,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kill_master_under_load_promote_and_the_old_master_rejoins(cluster: LocalCluster) -> None:
    registry = registry_of(cluster)
    wait_for(lambda: replica_connected(cluster), "the replica reports to the master")
    master, replica = cluster.members
    acked: list[bytes] = []
    stop = threading.Event()
    load = threading.Thread(target=produce_until_failure, args=(registry, acked, stop))
    load.start()
    wait_for(lambda: len(acked) >= 200, "200 messages are acknowledged")
    committer = PullConsumer(registry, "cg-progress")
    committer.commit(MessageQueue(TOPIC, BROKER_NAME, 1), 7)
    assert replica.broker is not None
    wait_for(
        lambda: _committed_on(replica.broker.address, "cg-progress", 1) == 7,
        "the replica's broker copied the group's committed offset",
    )
    master.store.kill()  # kill -9 in the middle of SYNC_MASTER sends
    load.join(timeout=60)
    stop.set()
    assert len(acked) >= 200

    # While the master store is down, a consumer reads everything from the replica.
    backlog = read_all(registry, "cg-during-outage")
    assert set(acked) <= set(backlog)

    out = promote_with_cli(registry)
    assert "is the master now (epoch 1" in out
    assert store_info(replica.store.address).role == "MASTER"
    wait_for(lambda: _writable(registry), "sends reach the promoted master")
    with Producer(registry, group="pg-after") as producer:
        after = producer.send(Message(topic=TOPIC, body=b"after failover"))
        assert after.status in (SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE)
    # Consumer progress survived the failover with the metadata the replica copied.
    assert committer.committed(MessageQueue(TOPIC, BROKER_NAME, 1)) == 7
    survivors = read_all(registry, "cg-after")
    assert set(acked) <= set(survivors)
    counts = Counter(survivors)
    assert all(counts[body] == 1 for body in acked)  # nothing duplicated
    assert b"after failover" in survivors

    # The old master comes back: its broker is told a newer epoch leads, demotes its
    # store, and its HA service follows the new master, dropping any tail it lacks.
    assert master.broker is not None and master.ha is not None
    master.broker.stop()
    master.ha.stop()
    old = cluster.start_member(0)
    new_master = replica.store.address

    def converged() -> bool:
        mine, theirs = store_info(old.store.address), store_info(new_master)
        return (
            mine.role == "REPLICA"
            and mine.epoch == theirs.epoch
            and mine.commitlog_max_offset == theirs.commitlog_max_offset
        )

    wait_for(converged, "the old master is a replica level with the new master")
    start = store_info(old.store.address).commitlog_min_offset
    assert commitlog(old.store.address, start) == commitlog(new_master, start)


def _committed_on(broker: str, group: str, queue_id: int) -> int:
    with sync_channel(broker) as channel:
        answer = broker_pb2_grpc.BrokerServiceStub(channel).QueryConsumerOffset(
            broker_pb2.QueryConsumerOffsetRequest(group=group, topic=TOPIC, queue_id=queue_id),
            timeout=5,
        )
    return answer.offset if answer.found else -1


def _topics_on(broker: str) -> set[str]:
    with sync_channel(broker) as channel:
        answer = broker_pb2_grpc.BrokerServiceStub(channel).ListTopics(
            broker_pb2.ListTopicsRequest(), timeout=5
        )
    return {t.name for t in answer.topics}


def _writable(registry: str) -> bool:
    with Producer(registry, group="pg-probe", options=ProducerOptions(retry_times=0)) as producer:
        try:
            producer.send(Message(topic=TOPIC, body=b"probe"))
        except SendError:
            return False
    return True


def test_a_consumer_far_behind_is_sent_to_the_replica(tmp_path: Path) -> None:
    cluster = start_cluster(
        tmp_path,
        "ASYNC_MASTER",
        "slave_read_enable=true",
        "suggest_pulling_from_slave_lag_messages=20",
    )
    try:
        master, replica = cluster.members
        registry = registry_of(cluster)
        with Producer(registry, group="pg") as producer:
            sent = producer.send_batch(
                [Message(topic=TOPIC, body=f"b{i}".encode()) for i in range(100)],
                sharding_key="one-queue",
            )
        queue = sent[0].queue
        wait_for(
            lambda: (
                store_info(replica.store.address).dispatched_offset
                == store_info(master.store.address).commitlog_max_offset
            ),
            "the replica has every message",
        )
        assert replica.broker is not None
        wait_for(
            lambda: TOPIC in _topics_on(replica.broker.address),
            "the replica's broker copied the topic",
        )
        consumer = PullConsumer(registry, "cg-behind")
        assert master.broker is not None and replica.broker is not None
        assert consumer.client.read_address_of(queue) == master.broker.address
        first = consumer.pull(queue, 0, 10)  # 90 behind the end: the master says go
        assert [bytes(m.body) for m in first.messages] == [f"b{i}".encode() for i in range(10)]
        assert consumer.client.read_address_of(queue) == replica.broker.address
        rest = consumer.pull(queue, first.next_begin_offset, 200)  # served by the replica
        assert [bytes(m.body) for m in rest.messages] == [f"b{i}".encode() for i in range(10, 100)]
    finally:
        cluster.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_ha_status_and_promote_mistakes_at_the_cli(cluster: LocalCluster) -> None:
    registry = registry_of(cluster)
    wait_for(lambda: replica_connected(cluster), "the replica reports to the master")
    replica_ha = cluster.members[1].ha
    assert replica_ha is not None
    status = cli("admin", "ha", "status", "--registry", registry)
    assert status.returncode == 0, status.stderr
    assert f"replica {replica_ha.address}" in status.stdout and "lag" in status.stdout
    for args, message in (
        (("nosuch",), "no live broker named 'nosuch'"),
        ((BROKER_NAME, "--broker-id", "7"), "has no live replica with id 7"),
        ((BROKER_NAME, "--broker-id", "0"), "0 is not in the range"),
        ((BROKER_NAME, "--max-lag-bytes", "-1"), "-1 is not in the range"),
    ):
        done = cli("admin", "broker", "promote", *args, "--registry", registry)
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    master_broker = cluster.members[0].broker
    assert master_broker is not None
    with sync_channel(master_broker.address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            broker_pb2_grpc.BrokerServiceStub(channel).Promote(
                broker_pb2.PromoteRequest(), timeout=10
            )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already the master" in str(refused.value.details())
    assert store_info(cluster.members[1].store.address).role == "REPLICA"  # nothing changed
