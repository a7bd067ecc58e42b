"""HA in a whole broker group: the replica finds its master through the registry, and
SYNC_MASTER appends are acknowledged only once the replica has the bytes.

A :class:`~boltmq.cli.dev.local_cluster.LocalCluster` (what ``boltmq dev --replicas 1``
runs) starts a registry and two members, each a store, its HA service and its
broker; the replica's HA service has no ``master_address`` and asks the
registry for the live broker with id 0 of its group.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from tests.integration.test_ha import (
    HA_SETTINGS,
    STORE_SETTINGS,
    TOPIC,
    assert_same_data,
    caught_up,
    ha_status,
    info,
    wait_until,
)

SLAVE_TIMEOUT_MS = 2000


@pytest.fixture
def group(tmp_path: Path) -> Iterator[LocalCluster]:
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        master_role="SYNC_MASTER",
        store_settings=(*STORE_SETTINGS, f"slave_timeout_ms={SLAVE_TIMEOUT_MS}"),
        ha_settings=(*HA_SETTINGS, "replica_start=FIRST_SEGMENT"),
        broker_settings=("register_interval_ms=500",),
        registry_settings=("broker_expiry_ms=3000", "scan_interval_ms=100"),
    )
    cluster = LocalCluster(spec).start()
    yield cluster
    cluster.stop()


def append_one(store: store_pb2_grpc.StoreServiceStub, body: bytes) -> tuple[int, int]:
    """Append one message; its status and the CommitLog end just past it (one writer)."""
    response = store.Append(
        store_pb2.AppendRequest(messages=[message_pb2.Message(topic=TOPIC, queue_id=0, body=body)]),
        timeout=10,
    )
    assert response.commitlog_offsets[0] >= 0, response.errors
    return response.statuses[0], info(store).commitlog_max_offset


def test_sync_master_waits_for_the_replica_found_through_the_registry(group: LocalCluster) -> None:
    master_member, replica_member = group.members
    assert master_member.ha is not None and replica_member.ha is not None
    with (
        sync_channel(master_member.store.address) as m_chan,
        sync_channel(replica_member.store.address) as r_chan,
    ):
        master = store_pb2_grpc.StoreServiceStub(m_chan)
        replica = store_pb2_grpc.StoreServiceStub(r_chan)
        wait_until(
            lambda: ha_status(replica_member.ha).connected,  # type: ignore[arg-type]
            "the replica to find its master through the registry",
        )
        assert ha_status(replica_member.ha).master_address == master_member.ha.address

        # Acknowledged PUT_OK only once the replica holds the message.
        wait_until(lambda: len(info(master).replicas) == 1, "the master store to know it")
        for n in range(20):
            status, end = append_one(master, f"sync-{n}".encode() * 50)
            assert status == message_pb2.PUT_OK
            assert info(replica).commitlog_max_offset >= end
        caught_up(master, replica)
        assert_same_data(master, replica, queue_ids=(0,))

        # A replica that stops answering: the append is stored but FLUSH_SLAVE_TIMEOUT.
        replica_member.ha.pause()
        try:
            status, end = append_one(master, b"while paused")
            assert status == message_pb2.FLUSH_SLAVE_TIMEOUT
            assert info(replica).commitlog_max_offset < end
        finally:
            replica_member.ha.resume()
        wait_until(lambda: info(replica).commitlog_max_offset >= end, "the replica to resume")

        # No replica at all: SLAVE_NOT_AVAILABLE at once.
        replica_member.ha.stop()
        wait_until(lambda: not info(master).replicas, "the master store to forget the replica")
        status, _ = append_one(master, b"alone")
        assert status == message_pb2.SLAVE_NOT_AVAILABLE
