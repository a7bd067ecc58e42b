"""A store bound to loopback: unreachable from the network, its probes and metrics still are.

The production pod binds the store to 127.0.0.1 (its broker and HA service dial
it there) and puts its plaintext health listener and metrics endpoint on the
wildcard host (``health_host``, ``metrics_host``), which the kubelet's probes
and the metrics scraper reach at the pod's address. The attack is a process
elsewhere on the network dialing the store's port at the machine's own
non-loopback address: it must find nothing listening.
"""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import store_pb2, store_pb2_grpc
from tests.integration.procs import ServiceProcess
from tests.integration.test_metrics import free_port
from tests.integration.test_tls import health_status


def network_address() -> str:
    """This machine's own non-loopback IPv4 address (skips the test without one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))  # no packet is sent: only a route is chosen
        except OSError:
            pytest.skip("no non-loopback IPv4 address to reach the services at")
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("no non-loopback IPv4 address to reach the services at")
    return address


def test_a_loopback_store_is_unreachable_from_the_network_but_probes_and_metrics_reach_it(
    tmp_path: Path,
) -> None:
    here = network_address()
    health_port, metrics_port = free_port(), free_port()
    store = ServiceProcess(
        "store",
        tmp_path / "logs",
        f"root_dir={tmp_path / 'store'}",
        "mapped_file_size_commitlog=4194304",
        f"health_port={health_port}",
        "health_host=0.0.0.0",
        f"metrics_port={metrics_port}",
        "metrics_host=0.0.0.0",
        host="127.0.0.1",
    ).start()
    try:
        with pytest.raises(grpc.RpcError) as refused:  # the attack: the store's port
            with sync_channel(f"{here}:{store.port}") as channel:
                store_pb2_grpc.StoreServiceStub(channel).GetStoreInfo(
                    store_pb2.GetStoreInfoRequest(), timeout=5
                )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert health_status(f"{here}:{health_port}") == health_pb2.HealthCheckResponse.SERVING
        with urllib.request.urlopen(f"http://{here}:{metrics_port}/metrics", timeout=10) as got:
            assert got.status == 200
        with sync_channel(store.address) as channel:  # its own pod still reaches it
            info = store_pb2_grpc.StoreServiceStub(channel).GetStoreInfo(
                store_pb2.GetStoreInfoRequest(), timeout=5
            )
        assert info.role == "MASTER"
    finally:
        assert store.stop() == 0
