"""Attacks on the store and HA ports of a mutual-TLS cluster, each refused (real processes).

The cluster is ``boltmq dev --tls``'s set-up: a SYNC_MASTER and a replica of
broker group ``broker-a``, every service on its own component certificate from
the internal CA, applications on a certificate of the application CA. The
attackers call the store and HA ports directly: without a certificate, with
the application's certificate, and with real component certificates of the
wrong role or of another broker group (``broker-b``). The legitimate cluster
keeps working: a send through the broker waits for the replica's HA service,
and a consumer reads it back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.tls import ClientTLS
from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.pull_consumer import PullConsumer
from boltmq.v1 import ha_pb2, ha_pb2_grpc, message_pb2, store_pb2, store_pb2_grpc
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import LaunchError, ServiceProcess

TOPIC = "InternalIdentity"
ACL_DOCUMENT = "plain_acl.json"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return dev_certificates.generate(
        tmp_path_factory.mktemp("tls"), groups=("broker-a", "broker-b")
    )


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, certificates: DevCertificates
) -> Iterator[LocalCluster]:
    spec = ClusterSpec(
        tmp_path_factory.mktemp("cluster"),
        replicas=1,
        master_role="SYNC_MASTER",
        store_settings=CLUSTER_STORE_SETTINGS,
        broker_settings=CLUSTER_BROKER_SETTINGS,
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
        certificates=certificates,
    )
    started = LocalCluster(spec).start()
    yield started
    started.stop()


def application(certificates: DevCertificates, *, certificate: bool = True) -> ClientTLS:
    """An application's TLS: trusts the servers; its certificate is the application CA's."""
    if not certificate:
        return ClientTLS.from_files(str(certificates.ca_file))
    return ClientTLS.from_files(
        str(certificates.ca_file),
        str(certificates.client_cert_file),
        str(certificates.client_key_file),
    )


def component(certificates: DevCertificates, role: str, group: str = "broker-a") -> ClientTLS:
    """What component ``role`` of ``group`` presents on its calls."""
    cert, key = certificates.component_files(role, group)
    return ClientTLS.from_files(str(certificates.ca_file), str(cert), str(key))


def store_call(address: str, tls: ClientTLS | None, call: Callable[[Any], Any]) -> Any:
    with sync_channel(address, tls) as channel:
        return call(store_pb2_grpc.StoreServiceStub(channel))


def refusal(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value


def read_acl(stub: Any) -> store_pb2.GetConfigResponse:
    return stub.GetConfig(store_pb2.GetConfigRequest(name=ACL_DOCUMENT), timeout=10)


STORE_ATTACKS: dict[str, Callable[[Any], Any]] = {
    "read the ACL document": read_acl,
    "write a config file": lambda stub: stub.PutConfig(
        store_pb2.PutConfigRequest(name="topics.json", content=b"{}"), timeout=10
    ),
    "append": lambda stub: stub.Append(
        store_pb2.AppendRequest(messages=[message_pb2.Message(topic=TOPIC, body=b"forged")]),
        timeout=10,
    ),
    "read a topic": lambda stub: stub.Pull(
        store_pb2.PullRequest(topic=TOPIC, queue_id=0, queue_offset=0), timeout=10
    ),
    "read a message": lambda stub: stub.Get(store_pb2.GetRequest(commitlog_offset=0), timeout=10),
    "stream the CommitLog": lambda stub: list(
        stub.ReadCommitLog(store_pb2.ReadCommitLogRequest(offset=0), timeout=10)
    ),
    "truncate": lambda stub: stub.Truncate(store_pb2.TruncateRequest(offset=0), timeout=10),
    "change the role": lambda stub: stub.SetRole(
        store_pb2.SetRoleRequest(role=store_pb2.StoreRole.REPLICA, broker_id=-1), timeout=10
    ),
    "report replica progress": lambda stub: stub.ReportReplicas(iter(()), timeout=10),
}


def test_the_legitimate_cluster_sends_replicates_and_consumes(
    cluster: LocalCluster, certificates: DevCertificates
) -> None:
    assert cluster.registry is not None
    tls = application(certificates)
    with Producer(cluster.registry.address, tls=tls) as producer:  # SYNC_MASTER: replica acks
        sent = [producer.send(Message(topic=TOPIC, body=f"m{i}".encode())) for i in range(3)]
    assert all(r.status.name == "SEND_OK" for r in sent)
    consumer = PullConsumer(cluster.registry.address, "identity-group", tls=tls)
    try:
        bodies = {
            bytes(m.body)
            for queue in consumer.queues(TOPIC)
            for m in consumer.pull(queue, 0, 32).messages
        }
    finally:
        consumer.shutdown()
    assert bodies == {b"m0", b"m1", b"m2"}
    master = cluster.members[0]
    assert master.ha is not None
    with sync_channel(master.ha.address, tls) as channel:  # Status stays open to the CLI
        status = ha_pb2_grpc.HAServiceStub(channel).Status(ha_pb2.HAStatusRequest(), timeout=10)
    assert [r.acked_offset > 0 for r in status.replicas] == [True]
    # The group's broker still reads its store's files, the ACL document's name included.
    assert store_call(master.store.address, component(certificates, "broker"), read_acl)


@pytest.mark.parametrize("attack", sorted(STORE_ATTACKS))
def test_callers_without_a_component_certificate_cannot_reach_the_store(
    cluster: LocalCluster, certificates: DevCertificates, attack: str
) -> None:
    address = cluster.members[0].store.address
    attempt = STORE_ATTACKS[attack]
    for tls in (None, application(certificates, certificate=False), application(certificates)):
        # The store's port trusts the internal CA only: the handshake fails.
        with pytest.raises(grpc.RpcError) as refused:
            store_call(address, tls, attempt)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("attack", "role", "group"),
    [
        ("read the ACL document", "ha", "broker-a"),
        ("read the ACL document", "store", "broker-a"),
        ("read the ACL document", "registry", ""),
        ("read the ACL document", "broker", "broker-b"),
        ("write a config file", "ha", "broker-a"),
        ("append", "ha", "broker-a"),
        ("append", "broker", "broker-b"),
        ("read a topic", "broker", "broker-b"),
        ("stream the CommitLog", "broker", "broker-a"),
        ("stream the CommitLog", "ha", "broker-b"),
        ("truncate", "broker", "broker-a"),
        ("truncate", "ha", "broker-b"),
        ("change the role", "broker", "broker-b"),
        ("change the role", "ha", "broker-b"),
        ("report replica progress", "broker", "broker-a"),
        ("report replica progress", "ha", "broker-b"),
    ],
)
def test_components_of_the_wrong_role_or_group_are_denied_by_the_store(
    cluster: LocalCluster, certificates: DevCertificates, attack: str, role: str, group: str
) -> None:
    address = cluster.members[0].store.address
    tls = component(certificates, role, group)
    refused = refusal(lambda: store_call(address, tls, STORE_ATTACKS[attack]))
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    details = refused.details()  # type: ignore[attr-defined]
    assert f"boltmq://{group}/{role} may not call /boltmq.v1.StoreService/" in details
    assert "of broker-a" in details


def replicate(address: str, tls: ClientTLS | None) -> list[Any]:
    """Pose as a replica: hand-shake from offset 0 and read the master's CommitLog."""
    report = ha_pb2.ReplicaReport(max_offset=0, replica_address="127.0.0.1:1", epoch=0)
    with sync_channel(address, tls) as channel:
        return list(ha_pb2_grpc.HAServiceStub(channel).Replicate(iter([report]), timeout=10))


def test_only_ha_services_of_the_group_may_replicate_from_the_master(
    cluster: LocalCluster, certificates: DevCertificates
) -> None:
    master = cluster.members[0]
    assert master.ha is not None
    address = master.ha.address
    assert refusal(lambda: replicate(address, None)).code() == grpc.StatusCode.UNAVAILABLE
    assert (
        refusal(lambda: replicate(address, application(certificates, certificate=False))).code()
        == grpc.StatusCode.UNAVAILABLE
    )
    as_application = refusal(lambda: replicate(address, application(certificates)))
    assert as_application.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "not issued by the internal CA" in as_application.details()  # type: ignore[attr-defined]
    for role, group in (("broker", "broker-a"), ("store", "broker-a"), ("ha", "broker-b")):
        tls = component(certificates, role, group)
        denied = refusal(lambda: replicate(address, tls))  # noqa: B023 (called at once)
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "accepts ha of broker-a" in denied.details()  # type: ignore[attr-defined]
    with sync_channel(address, application(certificates)) as channel:  # nobody extra counted
        status = ha_pb2_grpc.HAServiceStub(channel).Status(ha_pb2.HAStatusRequest(), timeout=10)
    assert len(status.replicas) == 1


@pytest.mark.parametrize("service", ["store", "ha"])
def test_a_tls_internal_service_needs_the_internal_ca_or_an_explicit_opt_out(
    tmp_path: Path, certificates: DevCertificates, service: str
) -> None:
    settings = [
        s for s in certificates.settings_for(service) if not s.startswith("tls_internal_ca_file")
    ]
    if service == "store":
        settings.append(f"root_dir={tmp_path / 'store'}")
    else:
        settings.append("store_address=127.0.0.1:1")
    refused = ServiceProcess(service, tmp_path / "logs", *settings)
    with pytest.raises(LaunchError, match="did not start"):
        refused.start()
    assert "tls_internal_ca_file is not set" in refused.last_error()
    assert "Traceback" not in refused.log()
    if service == "ha":
        return  # an HA service waits for its store before it is READY
    allowed = ServiceProcess(
        service, tmp_path / "logs-allowed", *settings, "allow_unauthenticated_internal=true"
    ).start()
    try:
        assert "accepts internal calls from ANY caller" in allowed.log()
    finally:
        allowed.stop()


def test_an_ha_service_with_another_groups_certificate_does_not_start(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    settings = (*certificates.settings_for("ha", "broker-b"), "store_address=127.0.0.1:1")
    process = ServiceProcess("ha", tmp_path / "logs", *settings, "broker_name=broker-a")
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert "names boltmq://broker-b/ha but broker_name is 'broker-a'" in process.last_error()
