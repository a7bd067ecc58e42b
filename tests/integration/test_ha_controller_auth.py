"""The HA controller against an etcd whose authentication is on.

A real etcd with one user allowed under the controller's prefix: the group's
master is elected by HA services that log in as that user
(``controller_username`` / ``controller_password_file``); a wrong password, no
credentials, or the right user outside its prefix get nothing from etcd.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.cli.etcd_server import EtcdServer
from services.ha.errors import ControllerUnavailable
from services.ha.group_keys import GroupKeys
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.test_failover import (
    BROKER_SETTINGS,
    HA_SETTINGS,
    STORE_SETTINGS,
    store_info,
    wait_for,
)
from tests.integration.test_ha_controller import LEASE_MS, elected

USER = "boltmq-ha"
PASSWORD = "correct horse battery staple"
PREFIX = "/boltmq"


def read_state(etcd: EtcdServer, credentials: tuple[str, str] | None, prefix: str = PREFIX) -> None:
    async def read() -> None:
        keys = GroupKeys(
            (etcd.endpoint,), prefix, "DefaultCluster", "broker-a", 5.0, credentials=credentials
        )
        try:
            await keys.state()
        finally:
            await keys.close()

    asyncio.run(read())


def test_only_the_controllers_user_reads_its_keys(etcd: EtcdServer) -> None:
    etcd.enable_auth(USER, PASSWORD, PREFIX)
    read_state(etcd, (USER, PASSWORD))
    for credentials, prefix in (
        ((USER, "wrong"), PREFIX),
        (None, PREFIX),
        ((USER, PASSWORD), "/other"),  # the user's role covers /boltmq/ only
    ):
        with pytest.raises(ControllerUnavailable, match="reading the group's keys failed"):
            read_state(etcd, credentials, prefix)


def test_a_group_elects_its_master_through_an_authenticating_etcd(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    etcd.enable_auth(USER, PASSWORD, PREFIX)
    secret = tmp_path / "etcd-password"
    secret.write_text(PASSWORD + "\n")
    spec = ClusterSpec(
        tmp_path / "cluster",
        replicas=1,
        master_role="SYNC_MASTER",
        store_settings=STORE_SETTINGS,
        broker_settings=BROKER_SETTINGS,
        ha_settings=(
            *HA_SETTINGS,
            f"controller_endpoints={etcd.endpoint}",
            f"controller_lease_ms={LEASE_MS}",
            f"controller_username={USER}",
            f"controller_password_file={secret}",
        ),
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
    )
    cluster = LocalCluster(spec).start()
    try:
        wait_for(lambda: elected(cluster), "the master is elected through etcd")
        master, replica = cluster.members
        assert store_info(master.store.address).epoch >= 1  # an election, not the setting
        assert store_info(replica.store.address).role == "REPLICA"
    finally:
        cluster.stop()
