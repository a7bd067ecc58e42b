"""Application certificates never pass as a component's (real store processes).

With one CA for applications and components, any application's certificate
would be a component's. Two defences, each attacked here: a service refuses
to start when its internal CA is also a CA it accepts applications from; and
an internal port that does trust an application CA (an operator's bundle)
still believes a component identity only from a certificate the internal CA
signed, whatever the certificate claims.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import store_pb2, store_pb2_grpc
from tests.integration.conftest import CLUSTER_STORE_SETTINGS
from tests.integration.procs import LaunchError, ServiceProcess
from tests.integration.test_internal_identity import application, component


def settings_without(certificates: DevCertificates, service: str, *names: str) -> list[str]:
    return [s for s in certificates.settings_for(service) if s.split("=", 1)[0] not in names]


@pytest.mark.parametrize("service", ["store", "registry", "broker"])
def test_a_service_whose_internal_ca_also_admits_applications_does_not_start(
    tmp_path: Path, service: str
) -> None:
    certificates = dev_certificates.generate(tmp_path / "tls")
    settings = settings_without(certificates, service, "tls_client_ca_file")
    settings.append(f"tls_client_ca_file={certificates.ca_file}")  # one CA for everyone
    if service == "store":
        settings.append(f"root_dir={tmp_path / 'store'}")
    process = ServiceProcess(service, tmp_path / "logs", *settings)
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert "the internal CA must issue component certificates only" in process.last_error()
    assert "Traceback" not in process.log()


@pytest.fixture(scope="module")
def forger(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    """Plays an application CA that signs whatever it is asked: ``boltmq://broker-a/broker``."""
    return dev_certificates.generate(tmp_path_factory.mktemp("forger"))


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return dev_certificates.generate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def store(
    tmp_path_factory: pytest.TempPathFactory, certificates: DevCertificates, forger: DevCertificates
) -> Iterator[ServiceProcess]:
    """A store whose port also trusts application CAs (both the real one and the forger)."""
    root = tmp_path_factory.mktemp("store")
    bundle = root / "application-cas.pem"
    bundle.write_bytes(certificates.app_ca_file.read_bytes() + forger.ca_file.read_bytes())
    process = ServiceProcess(
        "store",
        root / "logs",
        *certificates.settings_for("store"),
        f"tls_client_ca_file={bundle}",
        f"root_dir={root / 'data'}",
        *CLUSTER_STORE_SETTINGS,
    ).start()
    yield process
    process.stop()


def read_acl(address: str, tls: ClientTLS) -> store_pb2.GetConfigResponse:
    with sync_channel(address, tls) as channel:
        response: store_pb2.GetConfigResponse = store_pb2_grpc.StoreServiceStub(channel).GetConfig(
            store_pb2.GetConfigRequest(name="plain_acl.json"), timeout=10
        )
        return response


def test_an_application_certificate_is_no_component_even_where_the_handshake_takes_it(
    store: ServiceProcess, certificates: DevCertificates, forger: DevCertificates
) -> None:
    with pytest.raises(grpc.RpcError) as plain:
        read_acl(store.address, application(certificates))
    assert plain.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "not issued by the internal CA" in plain.value.details()  # type: ignore[attr-defined]
    forged_cert, forged_key = forger.component_files("broker", "broker-a")
    forged = ClientTLS.from_files(str(certificates.ca_file), str(forged_cert), str(forged_key))
    with pytest.raises(grpc.RpcError) as claimed:
        read_acl(store.address, forged)  # names boltmq://broker-a/broker, wrong issuer
    assert claimed.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "not issued by the internal CA" in claimed.value.details()  # type: ignore[attr-defined]
    assert "GetConfig" in store.log()  # the refusal is logged with the method
    assert read_acl(store.address, component(certificates, "broker")).found is False
