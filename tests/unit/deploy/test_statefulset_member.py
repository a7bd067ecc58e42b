"""``boltmq serve --statefulset-pod``: a broker-group member from its StatefulSet pod name.

Pure checks of :mod:`boltmq.cli.dev.statefulset`, the CLI's one-line errors, and real
store and broker processes started the way a pod's containers start them,
asked over gRPC which role and broker id they took.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.cli.dev.statefulset import InvalidPodName, member_settings, pod_ordinal
from boltmq.cli.main import main
from boltmq.kernel import channels
from boltmq.v1 import broker_pb2, broker_pb2_grpc

CALL_TIMEOUT_S = 10.0


@pytest.mark.parametrize(
    ("name", "ordinal"),
    [("boltmq-broker-a-0", 0), ("boltmq-broker-a-1", 1), ("b-12", 12), ("a1-2-3", 3)],
)
def test_ordinal_is_the_number_after_the_last_dash(name: str, ordinal: int) -> None:
    assert pod_ordinal(name) == ordinal


@pytest.mark.parametrize(
    "name",
    [
        "",
        "broker",
        "broker-",
        "-1",
        "broker-a",
        "Broker-1",
        "broker_a-1",
        "broker-01",
        "broker--1",
        "broker-1 ",
        "broker-1\n",
        "broker--",
        "broker-1.svc",
        "broker-1234567890",
        "a" * 62 + "-1",
    ],
)
def test_anything_but_a_statefulset_pod_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidPodName, match="--statefulset-pod expects"):
        pod_ordinal(name)


def test_member_settings_mirror_local_cluster_members() -> None:
    assert member_settings("store", "boltmq-broker-a-0") == {}  # the configured master role
    assert member_settings("store", "boltmq-broker-a-2") == {"broker_role": "SLAVE"}
    assert member_settings("broker", "boltmq-broker-a-0") == {"broker_id": 0}
    assert member_settings("broker", "boltmq-broker-a-2") == {"broker_id": 2}


@pytest.mark.parametrize("service", ["registry", "ha"])
def test_services_without_a_member_identity_refuse_the_flag(service: str) -> None:
    with pytest.raises(InvalidPodName, match=f"not to {service}"):
        member_settings(service, "boltmq-broker-a-1")


def test_a_derived_setting_also_given_with_set_is_a_contradiction() -> None:
    with pytest.raises(InvalidPodName, match="derives broker_id"):
        member_settings("broker", "boltmq-broker-a-1", {"broker_id": "1"})
    with pytest.raises(InvalidPodName, match="derives broker_role"):
        member_settings("store", "boltmq-broker-a-0", {"broker_role": "SLAVE"})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "broker", "--statefulset-pod", "Broker-1"], "--statefulset-pod expects"),
        (["serve", "ha", "--statefulset-pod", "boltmq-broker-a-1"], "not to ha"),
        (
            ["serve", "broker", "--statefulset-pod", "b-1", "--set", "broker_id=3"],
            "derives broker_id",
        ),
    ],
)
def test_cli_mistakes_are_one_line_and_exit_non_zero(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ServiceProcess]]:
    # The master role comes from the environment, as from the pod's ConfigMap:
    # a --set broker_role beside --statefulset-pod would be refused.
    monkeypatch.setenv("BOLTMQ_BROKER_ROLE", "SYNC_MASTER")
    processes: list[ServiceProcess] = []
    yield processes
    for process in reversed(processes):
        process.stop()


def _member(started: list[ServiceProcess], tmp_path: Path, pod: str) -> broker_pb2.BrokerInfo:
    """Store and broker of StatefulSet pod ``pod``, as its containers start them."""
    logs = tmp_path / "logs"
    store = ServiceProcess(
        "store",
        logs,
        f"root_dir={tmp_path / pod}",
        "mapped_file_size_commitlog=65536",
        "warm_mapped_file_ahead_bytes=0",
        host="127.0.0.1",
        flags=("--statefulset-pod", pod),
    )
    started.append(store.start())
    broker = ServiceProcess(
        "broker",
        logs,
        f"store_address={store.address}",
        "registry_addresses=",
        host="127.0.0.1",
        flags=("--statefulset-pod", pod),
    )
    started.append(broker.start())
    with channels.sync_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        return stub.GetBrokerInfo(broker_pb2.GetBrokerInfoRequest(), timeout=CALL_TIMEOUT_S)


def test_pod_zero_is_the_master_with_its_configured_role(
    started: list[ServiceProcess], tmp_path: Path
) -> None:
    info = _member(started, tmp_path, "boltmq-broker-a-0")
    assert (info.broker_id, info.store.broker_role) == (0, "SYNC_MASTER")


def test_a_later_pod_is_a_replica_with_its_ordinal_as_broker_id(
    started: list[ServiceProcess], tmp_path: Path
) -> None:
    info = _member(started, tmp_path, "boltmq-broker-a-2")
    assert (info.broker_id, info.store.broker_role) == (2, "SLAVE")
