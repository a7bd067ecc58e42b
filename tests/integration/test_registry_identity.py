"""Fake broker registrations against a mutual-TLS registry, each refused (real processes).

The cluster is ``boltmq dev --tls``'s set-up (registry, store and broker of group
``broker-a``, each on its own component certificate). The attacker announces
a broker that takes half of a topic's write queues, or unregisters the real
one: without a certificate, with the application's certificate, and with real
component certificates of another role or of another broker group. Route
look-ups stay open to applications, and the real broker keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq.cli.dev.certificates import DevCertificates
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.tls import ClientTLS
from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.v1 import registry_pb2, registry_pb2_grpc
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import LaunchError, ServiceProcess
from tests.integration.test_internal_identity import application, component
from tests.integration.test_internal_identity import certificates as certificates

TOPIC = "RegistryIdentity"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, certificates: DevCertificates
) -> Iterator[LocalCluster]:
    spec = ClusterSpec(
        tmp_path_factory.mktemp("cluster"),
        store_settings=CLUSTER_STORE_SETTINGS,
        broker_settings=CLUSTER_BROKER_SETTINGS,
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
        certificates=certificates,
    )
    started = LocalCluster(spec).start()
    assert started.registry is not None
    with Producer(started.registry.address, tls=application(certificates)) as producer:
        assert producer.send(Message(topic=TOPIC, body=b"x")).status.name == "SEND_OK"
    yield started
    started.stop()


def registry_call(cluster: LocalCluster, tls: ClientTLS | None, method: str, request: Any) -> Any:
    assert cluster.registry is not None
    with sync_channel(cluster.registry.address, tls) as channel:
        stub = registry_pb2_grpc.RegistryServiceStub(channel)
        return getattr(stub, method)(request, timeout=10)


def fake_registration(broker_name: str) -> registry_pb2.RegisterBrokerRequest:
    """A broker at an address the attacker owns, serving the topic with 4 write queues."""
    return registry_pb2.RegisterBrokerRequest(
        cluster_name="DefaultCluster",
        broker_name=broker_name,
        broker_id=0,
        address="127.0.0.1:1",
        topics=[
            registry_pb2.TopicConfig(name=TOPIC, read_queue_nums=4, write_queue_nums=4, perm=6)
        ],
    )


def route_brokers(cluster: LocalCluster, certificates: DevCertificates) -> set[str]:
    route = registry_call(
        cluster, application(certificates), "GetRoute", registry_pb2.GetRouteRequest(topic=TOPIC)
    )
    return {queue.broker_name for queue in route.queues}


def refused(cluster: LocalCluster, tls: ClientTLS | None, method: str, request: Any) -> Any:
    with pytest.raises(grpc.RpcError) as refusal:
        registry_call(cluster, tls, method, request)
    return refusal.value


@pytest.mark.parametrize("method", ["RegisterBroker", "UnregisterBroker"])
def test_callers_without_a_broker_certificate_cannot_register_or_unregister(
    cluster: LocalCluster, certificates: DevCertificates, method: str
) -> None:
    real = cluster.members[0].broker
    assert real is not None
    requests = {
        "RegisterBroker": fake_registration("broker-evil"),
        "UnregisterBroker": registry_pb2.UnregisterBrokerRequest(
            cluster_name="DefaultCluster", broker_name="broker-a", broker_id=0, address=real.address
        ),
    }
    request = requests[method]
    assert refused(cluster, None, method, request).code() == grpc.StatusCode.UNAVAILABLE
    bare = application(certificates, certificate=False)
    assert refused(cluster, bare, method, request).code() == grpc.StatusCode.UNAVAILABLE
    as_application = refused(cluster, application(certificates), method, request)
    assert as_application.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "not issued by the internal CA" in as_application.details()
    for role in ("ha", "store"):
        denied = refused(cluster, component(certificates, role), method, request)
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"boltmq://broker-a/{role} may not call" in denied.details()
    assert route_brokers(cluster, certificates) == {"broker-a"}  # the real broker only


def test_a_broker_registers_only_its_own_group(
    cluster: LocalCluster, certificates: DevCertificates
) -> None:
    other_group = component(certificates, "broker", "broker-b")
    denied = refused(cluster, other_group, "RegisterBroker", fake_registration("broker-a"))
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "accepts broker of the request's broker group" in denied.details()
    assert route_brokers(cluster, certificates) == {"broker-a"}
    # A broker of group broker-b may announce broker-b (and take it away again).
    registry_call(cluster, other_group, "RegisterBroker", fake_registration("broker-b"))
    assert route_brokers(cluster, certificates) == {"broker-a", "broker-b"}
    registry_call(
        cluster,
        other_group,
        "UnregisterBroker",
        registry_pb2.UnregisterBrokerRequest(
            cluster_name="DefaultCluster",
            broker_name="broker-b",
            broker_id=0,
            address="127.0.0.1:1",
        ),
    )
    assert route_brokers(cluster, certificates) == {"broker-a"}


def test_route_lookups_stay_open_and_the_real_broker_keeps_serving(
    cluster: LocalCluster, certificates: DevCertificates
) -> None:
    assert cluster.registry is not None
    tls = application(certificates)
    info = registry_call(cluster, tls, "GetClusterInfo", registry_pb2.GetClusterInfoRequest())
    assert {b.broker_name for b in info.brokers} == {"broker-a"}
    with Producer(cluster.registry.address, tls=tls) as producer:
        assert producer.send(Message(topic=TOPIC, body=b"after")).status.name == "SEND_OK"


def test_a_tls_registry_needs_the_internal_ca_or_an_explicit_opt_out(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    settings = [
        s for s in certificates.settings_for("registry") if not s.startswith("tls_internal")
    ]
    process = ServiceProcess("registry", tmp_path / "logs", *settings)
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert "tls_internal_ca_file is not set" in process.last_error()
    allowed = ServiceProcess(
        "registry", tmp_path / "logs-allowed", *settings, "allow_unauthenticated_internal=true"
    ).start()
    try:
        assert "accepts internal calls from ANY caller" in allowed.log()
    finally:
        allowed.stop()
