"""Automatic failover through etcd: a group's master elected, replaced, fenced (docs/ha.md).

Every process is real: a real etcd (Debian's ``etcd-server``, the ``etcd``
fixture), and ``boltmq serve registry|store|ha|broker`` started as ``boltmq dev
--replicas 1`` does, with ``controller_endpoints`` set on both HA services.
Clients are the SDK. Waits are for a state to be reached (bounded), never a
timing assertion.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, ProducerOptions
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.cli.etcd_server import EtcdServer
from boltmq.message import SendStatus
from boltmq.producer import SendError
from services.ha.errors import ControllerUnavailable
from services.ha.group_keys import GroupKeys, MasterRecord
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.test_failover import (
    BROKER_SETTINGS,
    HA_SETTINGS,
    STORE_SETTINGS,
    TOPIC,
    commitlog,
    produce_until_failure,
    read_all,
    registry_of,
    store_info,
    wait_for,
)
from tests.integration.test_metrics import free_port

LEASE_MS = 2000
ACKNOWLEDGED = (SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE)
"""A send the master took: SLAVE_NOT_AVAILABLE while its only replica is down."""


def start_cluster(tmp_path: Path, etcd: EtcdServer, master_role: str) -> LocalCluster:
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        master_role=master_role,
        store_settings=STORE_SETTINGS,
        broker_settings=BROKER_SETTINGS,
        ha_settings=(
            *HA_SETTINGS,
            f"controller_endpoints={etcd.endpoint}",
            f"controller_lease_ms={LEASE_MS}",
        ),
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
    )
    return LocalCluster(spec).start()


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdServer) -> Iterator[LocalCluster]:
    local = start_cluster(tmp_path, etcd, "SYNC_MASTER")
    try:
        yield local
    finally:
        local.stop()


def roles(cluster: LocalCluster) -> list[tuple[str, int]]:
    """(role, epoch) of each member's store (those that answer)."""
    return [(i.role, i.epoch) for i in (store_info(m.store.address) for m in cluster.members)]


def elected(cluster: LocalCluster) -> bool:
    master, replica = cluster.members
    return store_info(master.store.address).role == "MASTER" and bool(
        store_info(master.store.address).replicas
    )


def send_one(registry: str, body: bytes) -> SendStatus | str:
    """The status of one send without retries, or the SendError's text."""
    with Producer(
        registry, group="pg-probe", options=ProducerOptions(retry_times=0, send_timeout_ms=3000)
    ) as producer:
        try:
            return producer.send(Message(topic=TOPIC, body=body)).status
        except SendError as exc:
            return str(exc)


def test_elected_without_a_manual_step_kill_9_fails_over_and_the_old_master_rejoins(
    cluster: LocalCluster,
) -> None:
    registry = registry_of(cluster)
    master, replica = cluster.members
    wait_for(lambda: elected(cluster), "the configured master is elected and followed")
    first_epoch = store_info(master.store.address).epoch
    assert first_epoch >= 1  # an election, not the configured role
    assert store_info(replica.store.address).role == "REPLICA"

    acked: list[bytes] = []
    stop = threading.Event()
    load = threading.Thread(target=produce_until_failure, args=(registry, acked, stop))
    load.start()
    wait_for(lambda: len(acked) >= 100, "100 messages are acknowledged")
    assert master.ha is not None
    master.store.kill()  # kill -9 the master's store and its HA service mid-load
    master.ha.kill()
    load.join(timeout=60)
    stop.set()

    wait_for(lambda: store_info(replica.store.address).role == "MASTER", "the replica is elected")
    assert store_info(replica.store.address).epoch > first_epoch
    wait_for(
        lambda: send_one(registry, b"probe") in ACKNOWLEDGED,
        "sends are acknowledged by the new master",
    )
    survivors = read_all(registry, "cg-after")
    assert set(acked) <= set(survivors)  # nothing acknowledged under SYNC_MASTER is lost
    counts = Counter(survivors)
    assert all(counts[body] == 1 for body in acked)

    # The old master comes back as it was configured (a SYNC_MASTER store): its HA
    # service demotes it, and it follows the new master, cutting what that one lacks.
    assert master.broker is not None
    master.broker.stop()
    old = cluster.start_member(0)
    cluster.members[0] = old
    new_master = replica.store.address

    def converged() -> bool:
        mine, theirs = store_info(old.store.address), store_info(new_master)
        return (
            mine.role == "REPLICA"
            and theirs.role == "MASTER"
            and mine.epoch == theirs.epoch
            and mine.commitlog_max_offset == theirs.commitlog_max_offset
        )

    wait_for(converged, "the old master is a replica level with the new master")
    start = store_info(old.store.address).commitlog_min_offset
    assert commitlog(old.store.address, start) == commitlog(new_master, start)
    assert send_one(registry, b"after rejoin") == SendStatus.SEND_OK


def test_without_etcd_the_master_fences_itself_and_recovers(
    cluster: LocalCluster, etcd: EtcdServer
) -> None:
    registry = registry_of(cluster)
    wait_for(lambda: elected(cluster), "the configured master is elected and followed")
    assert send_one(registry, b"before") == SendStatus.SEND_OK
    etcd.stop()
    wait_for(
        lambda: all(role == "REPLICA" for role, _ in roles(cluster)),
        "the master, cut off from etcd, demotes its store",
    )
    refused = send_one(registry, b"while fenced")
    assert refused != SendStatus.SEND_OK
    # The fenced store refuses the write, or its broker, registered as a replica by
    # then, is no longer a route for sends.
    assert isinstance(refused, str), refused
    assert "replica store refuses writes" in refused or "no writable queue" in refused, refused
    epoch_fenced = max(epoch for _, epoch in roles(cluster))
    etcd.start()
    wait_for(
        lambda: [role for role, _ in roles(cluster)].count("MASTER") == 1,
        "a master is elected again once etcd is back",
    )
    assert max(epoch for _, epoch in roles(cluster)) > epoch_fenced
    wait_for(
        lambda: send_one(registry, b"after") == SendStatus.SEND_OK, "sends are acknowledged again"
    )
    assert {b"before", b"after"} <= set(read_all(registry, "cg-fence"))
    assert b"while fenced" not in read_all(registry, "cg-fence-2")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (("controller_endpoints=nohost",), "controller_endpoints: expected host:port"),
        (
            ("controller_endpoints=127.0.0.1:2379", "controller_lease_ms=1500"),
            "controller_lease_ms must be whole seconds",
        ),
        (
            ("controller_endpoints=127.0.0.1:2379", "controller_prefix=boltmq"),
            "controller_prefix must start with '/'",
        ),
        (
            ("controller_endpoints=127.0.0.1:2379", "master_address=127.0.0.1:1"),
            "master_address and controller_endpoints exclude each other",
        ),
    ],
)
def test_bad_controller_settings_are_refused_at_start(
    settings: tuple[str, ...], message: str
) -> None:
    args = [sys.executable, "-m", "boltmq.cli", "serve", "ha", "--port", "0"]
    for setting in ("registry_addresses=127.0.0.1:1", *settings):
        args += ["--set", setting]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_controller_moves_to_the_next_etcd_endpoint_when_one_fails(
    etcd: EtcdServer,
) -> None:
    async def scenario() -> None:
        dead = f"127.0.0.1:{free_port()}"
        keys = GroupKeys((dead, etcd.endpoint), "/boltmq", "C", "g", timeout_s=3.0)
        try:
            with pytest.raises(ControllerUnavailable, match=f"etcd at {dead}"):
                await keys.state()
            state = await keys.state()  # the next endpoint answers
            assert state.master is None and state.confirmed is None and state.members == {}
            lease_id = await keys.grant(2)
            record = MasterRecord("127.0.0.1:1", "127.0.0.1:2", 1)
            assert await keys.campaign(state, record, lease_id, 42)
            assert not await keys.campaign(state, record, lease_id, 42)  # the key exists
            await keys.announce("127.0.0.1:1", 42, lease_id)
            elected = await keys.state()
            assert elected.master == MasterRecord("127.0.0.1:1", "127.0.0.1:2", 1, lease_id)
            assert (elected.epoch, elected.confirmed, elected.members) == (
                1,
                42,
                {"127.0.0.1:1": 42},
            )
            await keys.revoke(lease_id)  # the master key and the member key go with it
            after = await keys.state()
            assert after.master is None and after.members == {} and after.epoch == 1
        finally:
            await keys.close()

    asyncio.run(scenario())
