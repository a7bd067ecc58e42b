"""TLS and mutual TLS across a real cluster (registry, stores, HA services, brokers).

``boltmq dev --tls``'s certificates (boltmq.cli.dev.certificates) serve every
process; the SDK and the CLI call with the CA and the client certificate. A
client without TLS, or with TLS but no client certificate, is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.cli import bench as bench_command
from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.cli.main import main
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.tls import ClientTLS
from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.pull_consumer import PullConsumer
from boltmq.v1 import broker_pb2, broker_pb2_grpc, store_pb2, store_pb2_grpc
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import LaunchError, ServiceProcess
from tests.integration.test_dev import Dev
from tests.integration.test_ha import info, wait_until
from tests.integration.test_metrics import free_port

TOPIC = "TlsTopic"


@pytest.fixture
def certificates(tmp_path: Path) -> DevCertificates:
    return dev_certificates.generate(tmp_path / "tls")


@pytest.fixture
def tls_cluster(tmp_path: Path, certificates: DevCertificates) -> Iterator[LocalCluster]:
    """A master and a replica (with HA services), every process on mutual TLS."""
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        store_settings=CLUSTER_STORE_SETTINGS,
        broker_settings=CLUSTER_BROKER_SETTINGS,
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
        certificates=certificates,
    )
    cluster = LocalCluster(spec).start()
    yield cluster
    cluster.stop()


def client_tls(certificates: DevCertificates, *, with_certificate: bool = True) -> ClientTLS:
    if not with_certificate:
        return ClientTLS.from_files(str(certificates.ca_file))
    return ClientTLS.from_files(
        str(certificates.ca_file),
        str(certificates.client_cert_file),
        str(certificates.client_key_file),
    )


def component_tls(certificates: DevCertificates, role: str, group: str = "broker-a") -> ClientTLS:
    """What component ``role`` of ``group`` presents on its calls."""
    cert, key = certificates.component_files(role, group)
    return ClientTLS.from_files(str(certificates.ca_file), str(cert), str(key))


def broker_info(address: str, tls: ClientTLS | None) -> broker_pb2.BrokerInfo:
    with sync_channel(address, tls) as channel:
        result: broker_pb2.BrokerInfo = broker_pb2_grpc.BrokerServiceStub(channel).GetBrokerInfo(
            broker_pb2.GetBrokerInfoRequest(), timeout=5
        )
        return result


def test_produce_and_consume_over_mutual_tls_and_replicate(
    tls_cluster: LocalCluster, certificates: DevCertificates
) -> None:
    assert tls_cluster.registry is not None
    tls = client_tls(certificates)
    producer = Producer(tls_cluster.registry.address, tls=tls).start()
    try:
        sent = [producer.send(Message(topic=TOPIC, body=f"m{i}".encode())) for i in range(5)]
    finally:
        producer.shutdown()
    assert all(r.status.name == "SEND_OK" for r in sent)
    consumer = PullConsumer(tls_cluster.registry.address, "tls-group", tls=tls)
    try:
        bodies = set()
        for queue in consumer.queues(TOPIC):
            bodies |= {bytes(m.body) for m in consumer.pull(queue, 0, 32).messages}
    finally:
        consumer.shutdown()
    assert bodies == {f"m{i}".encode() for i in range(5)}

    # The replica's HA service followed the master's over TLS, through stores on TLS
    # (which only the group's broker and HA service may call).
    master, replica = tls_cluster.members
    broker_tls = component_tls(certificates, "broker")
    with (
        sync_channel(master.store.address, broker_tls) as m_chan,
        sync_channel(replica.store.address, broker_tls) as r_chan,
    ):
        master_end = info(store_pb2_grpc.StoreServiceStub(m_chan)).commitlog_max_offset
        wait_until(
            lambda: (
                info(store_pb2_grpc.StoreServiceStub(r_chan)).commitlog_max_offset >= master_end
            ),
            "the replica to copy the master over TLS",
        )


def test_plaintext_and_certificate_less_clients_are_refused(
    tls_cluster: LocalCluster, certificates: DevCertificates
) -> None:
    broker = tls_cluster.members[0].broker
    assert broker is not None
    assert broker_info(broker.address, client_tls(certificates)).broker_name == "broker-a"
    with pytest.raises(grpc.RpcError) as plaintext:
        broker_info(broker.address, None)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    with pytest.raises(grpc.RpcError) as no_certificate:
        broker_info(broker.address, client_tls(certificates, with_certificate=False))
    assert no_certificate.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    other_ca = dev_certificates.generate(certificates.ca_file.parent / "other")
    with pytest.raises(grpc.RpcError):
        broker_info(broker.address, client_tls(other_ca))  # a certificate of another CA


def test_cli_produces_over_tls_and_says_why_when_a_file_is_missing(
    tls_cluster: LocalCluster, certificates: DevCertificates
) -> None:
    assert tls_cluster.registry is not None
    flags = [
        "--registry",
        tls_cluster.registry.address,
        "--tls-ca",
        str(certificates.ca_file),
        "--tls-cert",
        str(certificates.client_cert_file),
        "--tls-key",
        str(certificates.client_key_file),
    ]
    result = CliRunner().invoke(main, ["produce", *flags, "--topic", TOPIC, "--body", "cli"])
    assert result.exit_code == 0, result.output
    assert "SEND_OK" in result.output
    bench = ["--topic", "TlsBench", "--count", "30", "--json"]
    produced = CliRunner().invoke(
        bench_command, ["produce", *flags, *bench, "--batch", "10", "--concurrency", "1"]
    )
    assert produced.exit_code == 0, produced.output
    consumed = CliRunner().invoke(bench_command, ["consume", *flags, *bench])
    assert consumed.exit_code == 0, consumed.output
    assert json.loads(consumed.output.splitlines()[-1])["messages"] >= 30
    plaintext = CliRunner().invoke(bench_command, ["produce", *flags[:2], *bench])
    assert plaintext.exit_code == 1 and "Traceback" not in plaintext.output
    missing = CliRunner().invoke(
        main,
        ["produce", *flags[:2], "--tls-ca", "/nonexistent.pem", "--topic", TOPIC, "--body", "x"],
    )
    assert missing.exit_code == 1
    assert "--tls-ca: cannot read /nonexistent.pem" in missing.output
    assert "Traceback" not in missing.output


@pytest.mark.parametrize(
    "service, setting, message",
    [
        ("registry", "tls_cert_file={missing}", "tls_cert_file: cannot read"),
        ("store", "tls_cert_file={key}", "tls_cert_file: {key} holds no PEM certificate"),
        ("registry", "tls_key_file={cert}", "tls_key_file: {cert} holds no PEM private key"),
        ("registry", "tls_client_ca_file={missing}", "tls_client_ca_file: cannot read"),
        ("broker", "tls_ca_file={missing}", "tls_ca_file: cannot read"),
        ("ha", "tls_client_key_file={cert}", "tls_client_key_file: {cert} holds no PEM private"),
    ],
)
def test_a_service_with_an_unusable_tls_file_stops_with_one_clear_line(
    tmp_path: Path, certificates: DevCertificates, service: str, setting: str, message: str
) -> None:
    names = {
        "missing": str(tmp_path / "missing.pem"),
        "key": str(certificates.component_files("registry")[1]),
        "cert": str(certificates.component_files("registry")[0]),
    }
    settings = dict(item.split("=", 1) for item in certificates.settings_for(service))
    name, value = setting.format(**names).split("=", 1)
    settings[name] = value
    if service == "store":
        settings["root_dir"] = str(tmp_path / "store")
    process = ServiceProcess(service, tmp_path / "logs", *(f"{k}={v}" for k, v in settings.items()))
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert process.last_error() == process.last_error().strip()
    assert message.format(**names) in process.last_error()
    assert "Traceback" not in process.log()


def test_dev_tls_generates_certificates_and_serves_only_tls(tmp_path: Path) -> None:
    dev = Dev(tmp_path / "data", "--tls")
    try:
        endpoints = dev.wait_ready()
        tls_dir = tmp_path / "data" / "tls"
        hint = next(line for line in dev.banner if line.startswith("try:"))
        assert f"--tls-ca {tls_dir / 'ca.pem'}" in hint
        certificates = DevCertificates(tls_dir)
        assert f"certificate {tls_dir / 'client.pem'}" in "\n".join(dev.banner)
        assert broker_info(endpoints["broker"], client_tls(certificates)).broker_name
        with pytest.raises(grpc.RpcError):
            broker_info(endpoints["broker"], None)
    finally:
        dev.kill()


def health_status(address: str, service: str = "") -> int:
    """The plaintext health check the kubelet's gRPC probe makes."""
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
        return int(reply.status)


@pytest.mark.parametrize("service", ["registry", "store"])
def test_health_port_answers_plaintext_probes_of_a_mutual_tls_service_and_nothing_else(
    tmp_path: Path, certificates: DevCertificates, service: str
) -> None:
    health_port = free_port()
    settings = [*certificates.settings_for(service), f"health_port={health_port}"]
    if service == "store":
        settings.append(f"root_dir={tmp_path / 'store'}")
    process = ServiceProcess(service, tmp_path / "logs", *settings).start()
    try:
        health_address = f"127.0.0.1:{health_port}"
        assert health_status(health_address) == health_pb2.HealthCheckResponse.SERVING
        assert health_status(health_address, "liveness") == health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(health_address) as channel:  # health only, no store API
            with pytest.raises(grpc.RpcError) as refused:
                store_pb2_grpc.StoreServiceStub(channel).QueueRange(
                    store_pb2.QueueRangeRequest(topic="t", queue_id=0), timeout=5
                )
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError):  # the service port itself stays TLS-only
            health_status(process.address)
    finally:
        process.stop()
    with pytest.raises(grpc.RpcError) as gone:  # the health listener ends with the service
        health_status(health_address)
    assert gone.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("70000", "health_port must be between 0 and 65535"),
        ("-1", "health_port must be between 0 and 65535"),
        ("nine", "health_port"),
    ],
)
def test_a_bad_health_port_is_refused_with_one_clear_line(
    tmp_path: Path, value: str, message: str
) -> None:
    process = ServiceProcess("registry", tmp_path / "logs", f"health_port={value}")
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert message in process.last_error()


def test_health_port_equal_to_metrics_port_is_refused(tmp_path: Path) -> None:
    process = ServiceProcess("registry", tmp_path / "logs", "health_port=9199", "metrics_port=9199")
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert "health_port and metrics_port must differ" in process.last_error()
