"""Network faults under load: a broker frozen, the registry down, a replica cut off.

The load of :mod:`tests.reliability.load` runs through each fault. Clients
either carry on (cached routes while the registry is down) or fail clearly
(a SendError per refused batch while the broker is frozen, counted, never a
hang) and recover once the fault ends. Nothing acknowledged is lost: the
store's files are checked by ``boltmq store verify`` and the independent
reader, and a replica that was cut off holds, after catching up, the master's
records byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from tests.integration.test_failover import HA_SETTINGS, STORE_SETTINGS, store_info
from tests.reliability.conftest import FaultCluster, check_acknowledged, check_files
from tests.reliability.files import scan_commitlog
from tests.reliability.load import WAIT_S, Load
from tests.reliability.test_crash import ACKS_PER_PHASE, check_consumer
from tests.waiting import wait_until


def finish(cluster: FaultCluster, load: Load) -> None:
    """Drain, stop broker then store, and check the files and the consumer."""
    load.drain()
    cluster.broker.stop()
    cluster.stop_store()
    check_files(cluster.root_dir, load.ledger.acked)
    check_consumer(load.ledger)
    assert cluster.tracebacks() == []


def test_broker_frozen_by_sigstop_fails_sends_clearly_then_loses_no_acknowledged_message(
    fault_cluster: Callable[..., FaultCluster],
) -> None:
    cluster = fault_cluster()
    load = Load(cluster.registry.address).start()
    try:
        load.wait_acks(ACKS_PER_PHASE)
        failures = load.ledger.send_failures
        cluster.broker.pause()
        try:
            wait_until(
                lambda: load.ledger.send_failures >= failures + 2,
                "sends to the frozen broker fail (send timeout)",
                WAIT_S,
            )
        finally:
            cluster.broker.resume()
        load.wait_acks(ACKS_PER_PHASE)
        print(
            f"frozen broker: {load.ledger.send_failures} sends failed, "
            f"{load.ledger.acked_count()} acknowledged"
        )
        finish(cluster, load)
    finally:
        load.stop()


def test_registry_down_keeps_cached_routes_working_and_loses_no_acknowledged_message(
    fault_cluster: Callable[..., FaultCluster],
) -> None:
    cluster = fault_cluster()
    load = Load(cluster.registry.address).start()
    try:
        load.wait_acks(ACKS_PER_PHASE)
        port = cluster.registry.port
        assert cluster.registry.stop() == 0
        load.wait_acks(ACKS_PER_PHASE)  # producers and consumer go on with cached routes
        cluster.registry = cluster._start("registry", *cluster.registry.settings, port=port)
        load.wait_acks(ACKS_PER_PHASE)
        finish(cluster, load)
    finally:
        load.stop()


# ------------------------------------------------------------------ a replica cut off
@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        master_role="ASYNC_MASTER",
        flush="SYNC_FLUSH",
        store_settings=STORE_SETTINGS,
        ha_settings=HA_SETTINGS,
    )
    cluster = LocalCluster(spec).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_replica_cut_off_and_reconnected_holds_every_acknowledged_message(
    replicated: LocalCluster,
) -> None:
    master, replica = replicated.members
    assert replicated.registry is not None and replica.ha is not None
    load = Load(replicated.registry.address, consume=False).start()
    try:
        load.wait_acks(ACKS_PER_PHASE)
        replica.store.pause()  # cut off: it neither receives nor answers
        replica.ha.pause()
        try:
            load.wait_acks(ACKS_PER_PHASE)  # an ASYNC_MASTER goes on without it
        finally:
            replica.ha.resume()
            replica.store.resume()
        load.wait_acks(ACKS_PER_PHASE)
        load.stop_producing()
    finally:
        load.stop()
    target = store_info(master.store.address).commitlog_max_offset
    wait_until(
        lambda: store_info(replica.store.address).commitlog_max_offset == target,
        "the reconnected replica caught up with the master",
        WAIT_S,
    )
    replicated.stop()
    acked = load.ledger.acked
    check_files(master.data_dir, acked)
    check_acknowledged(replica.data_dir, acked)
    assert scan_commitlog(replica.data_dir).records == scan_commitlog(master.data_dir).records
