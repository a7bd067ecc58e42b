"""Floods of a mutual-TLS store and registry: callers are their component identities.

The services run on ``boltmq dev --tls``'s certificates with the internal CA,
so a component is keyed by the identity its certificate names, which nobody
else can spend, and every caller here comes from 127.0.0.1. A compromised
HA service that keeps streams open to its store exhausts its own budget
only: the group's broker still reads and writes. An application flooding the
registry's port (it has no component identity: its IP address) is refused,
while a broker on the same machine is still served.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc

from boltmq.cli.dev.certificates import DevCertificates
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import registry_pb2_grpc, store_pb2_grpc
from tests.integration.conftest import CLUSTER_STORE_SETTINGS
from tests.integration.procs import ServiceProcess
from tests.integration.test_caller_limits import (
    FLOOD,
    append,
    cluster_info,
    flood,
    open_streams,
    store_info,
)
from tests.integration.test_internal_identity import application, component
from tests.integration.test_internal_identity import certificates as certificates


def test_a_compromised_ha_service_cannot_starve_its_stores_broker(
    spawn: Callable[..., ServiceProcess], tmp_path: Path, certificates: DevCertificates
) -> None:
    store = spawn(
        "store",
        f"root_dir={tmp_path / 'store'}",
        *CLUSTER_STORE_SETTINGS,
        *certificates.settings_for("store"),
        "caller_in_flight_max=2",
        "caller_request_rate_per_s=0",
    )
    with (
        sync_channel(store.address, component(certificates, "ha")) as ha_channel,
        sync_channel(store.address, component(certificates, "broker")) as broker_channel,
    ):
        ha = store_pb2_grpc.StoreServiceStub(ha_channel)
        streams = open_streams(ha, 2)
        try:
            outcomes = flood(store_info(ha))
            assert {code for code, _ in outcomes} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
            assert outcomes[0][1] == (
                "too many calls from boltmq://broker-a/ha to the store: more than 2 calls in "
                "flight at once (caller_in_flight_max); retry later"
            )
            broker = store_pb2_grpc.StoreServiceStub(broker_channel)  # the same address
            assert store_info(broker)().role == "MASTER"
            assert list(append(broker).commitlog_offsets) == [0]
        finally:
            for stream in streams:
                stream.cancel()


def test_an_application_flooding_the_registry_does_not_starve_the_brokers(
    spawn: Callable[..., ServiceProcess], certificates: DevCertificates
) -> None:
    registry = spawn(
        "registry",
        *certificates.settings_for("registry"),
        "caller_request_rate_per_s=0.001",  # the burst is all a caller gets in the test
        "caller_request_burst=10",
    )

    with sync_channel(registry.address, application(certificates)) as channel:
        outcomes = flood(cluster_info(registry_pb2_grpc.RegistryServiceStub(channel)))
    codes = [code for code, _ in outcomes]
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == FLOOD - 10
    assert (
        "too many calls from 127.0.0.1 to the registry: more than 0.001 calls a second "
        "(caller_request_rate_per_s, burst 10); retry later"
    ) in {details for _, details in outcomes}
    for group in ("broker-a", "broker-b"):  # each broker its own budget, from the same address
        with sync_channel(registry.address, component(certificates, "broker", group)) as channel:
            stub = registry_pb2_grpc.RegistryServiceStub(channel)
            assert [code for code, _ in flood(cluster_info(stub), 5)] == [grpc.StatusCode.OK] * 5
