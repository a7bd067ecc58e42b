"""A revoked component certificate is refused on an internal port (real store process).

The store runs on its component certificate from the internal CA with
``tls_internal_crl_file`` naming a CRL that CA signed. The attacker holds a
real component certificate that leaked (the group's broker's, then its HA
service's): once the CRL lists its serial the store refuses it with
UNAUTHENTICATED, within a second of the file changing and without a restart,
while the group's other component keeps working; an empty CRL lets it back.
A CRL the internal CA did not sign, or a file holding none, stops the store at
start with a clear line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq.cli.dev import certificates as dev_certificates
from boltmq.cli.dev.certificates import DevCertificates
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from tests.integration.conftest import CLUSTER_STORE_SETTINGS
from tests.integration.procs import LaunchError, ServiceProcess
from tests.revocation_lists import write_crl
from tests.waiting import wait_until

TOPIC = "Revocation"


def component(certificates: DevCertificates, role: str) -> ClientTLS:
    cert, key = certificates.component_files(role, "broker-a")
    return ClientTLS.from_files(str(certificates.ca_file), str(cert), str(key))


def append_as(address: str, tls: ClientTLS) -> Any:
    with sync_channel(address, tls) as channel:
        return store_pb2_grpc.StoreServiceStub(channel).Append(
            store_pb2.AppendRequest(messages=[message_pb2.Message(topic=TOPIC, body=b"x")]),
            timeout=10,
        )


def stream_as(address: str, tls: ClientTLS) -> list[Any]:
    with sync_channel(address, tls) as channel:
        stub = store_pb2_grpc.StoreServiceStub(channel)
        return list(stub.ReadCommitLog(store_pb2.ReadCommitLogRequest(offset=0), timeout=10))


def refusal(call: Any) -> str:
    """The details of the UNAUTHENTICATED refusal ``call`` gets ("" when it is served)."""
    try:
        call()
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
        return str(exc.details())
    return ""


@pytest.fixture
def certificates(tmp_path: Path) -> DevCertificates:
    return dev_certificates.generate(tmp_path / "tls", keep_internal_ca_key=True)


@pytest.fixture
def crl_file(tmp_path: Path, certificates: DevCertificates) -> Path:
    path = tmp_path / "internal-crl.pem"
    write_crl(certificates, path)
    return path


@pytest.fixture
def store(
    tmp_path: Path, certificates: DevCertificates, crl_file: Path
) -> Iterator[ServiceProcess]:
    process = ServiceProcess(
        "store",
        tmp_path / "logs",
        f"root_dir={tmp_path / 'store'}",
        *CLUSTER_STORE_SETTINGS,
        *certificates.settings_for("store"),
        f"tls_internal_crl_file={crl_file}",
    ).start()
    yield process
    process.stop()


def test_a_revoked_certificate_is_refused_without_a_restart_and_readmitted_when_lifted(
    store: ServiceProcess, certificates: DevCertificates, crl_file: Path
) -> None:
    broker, ha = component(certificates, "broker"), component(certificates, "ha")
    assert append_as(store.address, broker).statuses[0] == message_pb2.PUT_OK

    write_crl(certificates, crl_file, "broker")
    wait_until(
        lambda: refusal(lambda: append_as(store.address, broker)),
        "the store refuses the revoked broker certificate",
    )
    details = refusal(lambda: append_as(store.address, broker))
    assert "is revoked by the internal CA's CRL" in details
    assert stream_as(store.address, ha), "the group's HA service is still served"

    write_crl(certificates, crl_file, "ha")
    wait_until(
        lambda: refusal(lambda: stream_as(store.address, ha)),
        "the store refuses the revoked HA certificate",
    )
    assert append_as(store.address, broker).statuses[0] == message_pb2.PUT_OK

    crl_file.write_bytes(b"not a CRL")  # a broken update keeps what was revoked
    wait_until(  # the file is looked at when a call comes
        lambda: (
            "is revoked" in refusal(lambda: stream_as(store.address, ha))
            and "holds no PEM CRL" in store.log_path.read_text()
        ),
        "the reload error logged, the revocation kept",
    )

    write_crl(certificates, crl_file)
    wait_until(lambda: not refusal(lambda: stream_as(store.address, ha)), "HA readmitted")


def test_a_crl_the_internal_ca_did_not_sign_or_no_crl_stops_the_store(
    tmp_path: Path, certificates: DevCertificates
) -> None:
    other = dev_certificates.generate(tmp_path / "other", keep_internal_ca_key=True)
    foreign = tmp_path / "foreign-crl.pem"
    write_crl(other, foreign)
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"")
    for path, reason in (
        (foreign, "is not signed by the internal CA"),
        (empty, "holds no PEM CRL"),
    ):
        process = ServiceProcess(
            "store",
            tmp_path / f"logs-{path.stem}",
            f"root_dir={tmp_path / 'store'}",
            *CLUSTER_STORE_SETTINGS,
            *certificates.settings_for("store"),
            f"tls_internal_crl_file={path}",
        )
        with pytest.raises(LaunchError, match="did not start"):
            process.start()
        assert reason in process.last_error()
