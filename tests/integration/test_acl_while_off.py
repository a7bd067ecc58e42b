"""The ACL while access control is off (preparing accounts), across real processes.

With ``acl_enable`` off no call is signed, so the broker hands the ACL only to
callers on its own host: a caller reaching the port from another address can
neither read the prepared accounts (GetAcl, GetMetadata) nor plant an admin
account that would outlive turning the ACL on. The operator prepares accounts
with ``boltmq admin acl ... --broker-address 127.0.0.1:PORT`` on the broker's host.

The broker listens on every address; the "remote" caller dials the host's own
non-loopback address, so the broker sees it as a peer from the network.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from boltmq.cli.main import main
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import Credentials, RequestSigner
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import ServiceProcess

OPERATOR = Credentials("platform-admin", "prepared-admin-secret")
PLANTED = Credentials("planted-admin", "attacker-secret-1")


def network_address() -> str:
    """This host's address on its default route (not loopback), or "" when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # no packet is sent: it only picks a route
            host: str = probe.getsockname()[0]
        except OSError:
            return ""
    return "" if host.startswith("127.") else host


class OpenCluster:
    """Registry, store and a broker on every address, ACL off until :meth:`enforce`."""

    def __init__(self, tmp_path: Path) -> None:
        self.log_dir = tmp_path / "logs"
        self.registry = ServiceProcess("registry", self.log_dir, *CLUSTER_REGISTRY_SETTINGS).start()
        self.store = ServiceProcess(
            "store", self.log_dir, f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS
        ).start()
        self.broker = self._start_broker(0)

    def _start_broker(self, port: int, *settings: str) -> ServiceProcess:
        return ServiceProcess(
            "broker",
            self.log_dir,
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            *CLUSTER_BROKER_SETTINGS,
            *settings,
            port=port,
            host="0.0.0.0",
        ).start()

    def enforce(self) -> None:
        """Restart the broker on its port with ``acl_enable`` on."""
        assert self.broker.stop() == 0, self.broker.last_error()
        self.broker = self._start_broker(self.broker.port, "acl_enable=true")

    def stub(
        self, host: str, credentials: Credentials | None = None
    ) -> broker_pb2_grpc.BrokerServiceStub:
        channel = sync_channel(f"{host}:{self.broker.port}")
        if credentials is not None:
            channel = grpc.intercept_channel(channel, RequestSigner(credentials, "test-client"))
        return broker_pb2_grpc.BrokerServiceStub(channel)

    def stop(self) -> None:
        for proc in (self.broker, self.store, self.registry):
            proc.stop()


@pytest.fixture
def open_cluster(tmp_path: Path) -> Iterator[OpenCluster]:
    if not network_address():
        pytest.skip("this host has no non-loopback address to call from")
    cluster = OpenCluster(tmp_path)
    yield cluster
    cluster.stop()


def refusal(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


def acl_cli(cluster: OpenCluster, *args: str, secret: str = "") -> str:
    result = CliRunner().invoke(
        main,
        [
            "admin",
            "acl",
            *args,
            "--registry",
            cluster.registry.address,
            "--broker-address",
            f"127.0.0.1:{cluster.broker.port}",
        ],
        env={"BOLTMQ_ACCOUNT_SECRET": secret},
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_remote_callers_cannot_read_or_plant_accounts_while_the_acl_is_off(
    open_cluster: OpenCluster,
) -> None:
    # The operator prepares an admin account from the broker's host.
    out = acl_cli(
        open_cluster, "set-account", OPERATOR.access_key, "--admin", secret=OPERATOR.secret_key
    )
    assert "not enforced" in out
    shown = acl_cli(open_cluster, "show")
    assert OPERATOR.access_key in shown and OPERATOR.secret_key not in shown

    remote = open_cluster.stub(network_address())
    for call in (
        lambda: remote.GetAcl(broker_pb2.GetAclRequest(), timeout=5),
        lambda: remote.UpdateAcl(
            broker_pb2.UpdateAclRequest(
                upsert_account_json=(
                    f'{{"accessKey": "{PLANTED.access_key}", '
                    f'"secretKey": "{PLANTED.secret_key}", "admin": true}}'
                )
            ),
            timeout=5,
        ),
    ):
        error = refusal(call)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "access control is off" in error.details()
        assert "--broker-address 127.0.0.1:PORT" in error.details()
    documents = remote.GetMetadata(broker_pb2.GetMetadataRequest(), timeout=5).documents
    assert "topics.json" in documents
    assert not any(name.startswith("plain_acl") for name in documents)
    assert not any(OPERATOR.secret_key.encode() in data for data in documents.values())

    # The CLI run from elsewhere gets the broker's explanation, not a traceback.
    result = CliRunner().invoke(
        main,
        [
            "admin",
            "acl",
            "show",
            "--registry",
            open_cluster.registry.address,
            "--broker-address",
            f"{network_address()}:{open_cluster.broker.port}",
        ],
    )
    assert result.exit_code == 1
    assert "PERMISSION_DENIED" in result.output and "Traceback" not in result.output

    # Turned on, the prepared account administers and the planted one does not exist.
    open_cluster.enforce()
    admin = open_cluster.stub(network_address(), OPERATOR)
    document = admin.GetAcl(broker_pb2.GetAclRequest(), timeout=5)
    assert document.enforced and PLANTED.access_key not in document.json
    planted = open_cluster.stub(network_address(), PLANTED)
    error = refusal(lambda: planted.GetAcl(broker_pb2.GetAclRequest(), timeout=5))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
