"""One caller floods a real store, registry or HA service; the others are still served.

Without TLS a caller is its IP address. The flooder calls from 127.0.0.1; the
other caller's connections leave from 127.0.0.2 (:class:`SourceProxy`), as a
second machine's would. Each service runs with a small limit: beyond it the
flooder gets RESOURCE_EXHAUSTED naming itself, the service and the setting,
while the other caller's calls and writes go through. A limit of 0 imposes
nothing, and a negative one stops the service at start with one clear line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import (
    ha_pb2,
    ha_pb2_grpc,
    message_pb2,
    registry_pb2,
    registry_pb2_grpc,
    store_pb2,
    store_pb2_grpc,
)
from tests.integration.conftest import CLUSTER_STORE_SETTINGS
from tests.integration.procs import LaunchError, ServiceProcess
from tests.integration.source_proxy import SourceProxy
from tests.integration.test_ha import HA_SETTINGS
from tests.waiting import wait_until

FLOOD = 40
"""Parallel calls of one flood."""


def code_of(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
    """The status code and details ``call`` ends with."""
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()  # type: ignore[attr-defined]
    return grpc.StatusCode.OK, ""


def flood(call: Callable[[], Any], count: int = FLOOD) -> list[tuple[grpc.StatusCode, str]]:
    """``count`` calls at once; their outcomes."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: code_of(call), range(count)))


def store_info(stub: store_pb2_grpc.StoreServiceStub) -> Callable[[], Any]:
    return lambda: stub.GetStoreInfo(store_pb2.GetStoreInfoRequest(), timeout=10)


def cluster_info(stub: registry_pb2_grpc.RegistryServiceStub) -> Callable[[], Any]:
    return lambda: stub.GetClusterInfo(registry_pb2.GetClusterInfoRequest(), timeout=10)


def append(stub: store_pb2_grpc.StoreServiceStub) -> Any:
    message = message_pb2.Message(topic="Limits", queue_id=0, body=b"served")
    return stub.Append(store_pb2.AppendRequest(messages=[message]), timeout=10)


def open_streams(stub: store_pb2_grpc.StoreServiceStub, count: int) -> list[Any]:
    """``count`` CommitLog streams that stay open, each seen answering (so it holds its
    slot) before the next opens."""
    follow = store_pb2.ReadCommitLogRequest(offset=0, follow=True, heartbeat_ms=100)
    streams = []
    for _ in range(count):
        streams.append(stub.ReadCommitLog(follow, timeout=60))
        next(streams[-1])  # a heartbeat: the store took the stream
    return streams


@pytest.fixture
def store(spawn: Callable[..., ServiceProcess], tmp_path: Path) -> Callable[..., ServiceProcess]:
    def start(*settings: str) -> ServiceProcess:
        return spawn("store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS, *settings)

    return start


def test_open_streams_beyond_the_stores_in_flight_limit_are_refused_others_served(
    store: Callable[..., ServiceProcess],
) -> None:
    proc = store("caller_in_flight_max=3", "caller_request_rate_per_s=0")
    with sync_channel(proc.address) as channel, SourceProxy(proc.address) as proxy:
        flooder = store_pb2_grpc.StoreServiceStub(channel)
        streams = open_streams(flooder, 3)
        try:
            outcomes = flood(store_info(flooder))
            assert {code for code, _ in outcomes} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
            assert outcomes[0][1] == (
                "too many calls from 127.0.0.1 to the store: more than 3 calls in flight at "
                "once (caller_in_flight_max); retry later"
            )
            extra = flooder.WatchArrivals(store_pb2.WatchArrivalsRequest())
            assert code_of(lambda: next(extra))[0] is grpc.StatusCode.RESOURCE_EXHAUSTED
            with sync_channel(proxy.address) as other_channel:  # from 127.0.0.2
                other = store_pb2_grpc.StoreServiceStub(other_channel)
                assert store_info(other)().role == "MASTER"
                assert list(append(other).commitlog_offsets) == [0]  # a write, too
        finally:
            for stream in streams:
                stream.cancel()
        wait_until(
            lambda: code_of(store_info(flooder))[0] is grpc.StatusCode.OK,
            "the ended streams' slots to come back",
        )
    assert 1 <= proc.log().count("RESOURCE_EXHAUSTED") <= 3  # once per caller every 10 s


def test_a_limit_of_zero_imposes_nothing(store: Callable[..., ServiceProcess]) -> None:
    proc = store("caller_in_flight_max=0", "caller_request_rate_per_s=0")
    with sync_channel(proc.address) as channel:
        stub = store_pb2_grpc.StoreServiceStub(channel)
        streams = open_streams(stub, FLOOD)
        try:
            assert flood(store_info(stub), 2 * FLOOD) == [(grpc.StatusCode.OK, "")] * 2 * FLOOD
        finally:
            for stream in streams:
                stream.cancel()


def test_a_flood_beyond_the_registrys_rate_is_refused_others_served(
    spawn: Callable[..., ServiceProcess],
) -> None:
    # 0.001 calls a second: the burst is all the flooder gets during the test.
    proc = spawn("registry", "caller_request_rate_per_s=0.001", "caller_request_burst=10")

    with sync_channel(proc.address) as channel:
        outcomes = flood(cluster_info(registry_pb2_grpc.RegistryServiceStub(channel)))
    codes = [code for code, _ in outcomes]
    assert codes.count(grpc.StatusCode.OK) == 10
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == FLOOD - 10
    assert (
        "too many calls from 127.0.0.1 to the registry: more than 0.001 calls a second "
        "(caller_request_rate_per_s, burst 10); retry later"
    ) in {details for _, details in outcomes}
    with SourceProxy(proc.address) as proxy, sync_channel(proxy.address) as other_channel:
        other = registry_pb2_grpc.RegistryServiceStub(other_channel)  # from 127.0.0.2
        assert [code for code, _ in flood(cluster_info(other), 10)] == [grpc.StatusCode.OK] * 10


def replicate_forever(stub: ha_pb2_grpc.HAServiceStub, name: str, until: threading.Event) -> Any:
    """A stream posing as a replica (plaintext: anyone may) until ``until`` is set; it
    reports often enough that the master never ends it as silent."""

    def reports() -> Iterator[ha_pb2.ReplicaReport]:
        yield ha_pb2.ReplicaReport(max_offset=0, replica_address=name, epoch=0)
        while not until.wait(0.2):
            yield ha_pb2.ReplicaReport(max_offset=0, replica_address=name, epoch=0)

    return stub.Replicate(reports())


def test_replica_streams_beyond_the_has_in_flight_limit_are_refused_others_served(
    store: Callable[..., ServiceProcess], spawn: Callable[..., ServiceProcess]
) -> None:
    master = spawn(
        "ha",
        f"store_address={store().address}",
        *HA_SETTINGS,
        "caller_in_flight_max=2",
        "caller_request_rate_per_s=0",
    )

    def status(stub: ha_pb2_grpc.HAServiceStub) -> Callable[[], Any]:
        return lambda: stub.Status(ha_pb2.HAStatusRequest(), timeout=10)

    done = threading.Event()
    with sync_channel(master.address) as channel, SourceProxy(master.address) as proxy:
        flooder = ha_pb2_grpc.HAServiceStub(channel)
        streams = []
        try:
            for n in range(2):
                streams.append(replicate_forever(flooder, f"127.0.0.1:{n + 1}", done))
                assert next(streams[-1]).handshake  # the master took the stream
            outcomes = flood(status(flooder))
            assert {code for code, _ in outcomes} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
            assert outcomes[0][1] == (
                "too many calls from 127.0.0.1 to the HA service: more than 2 calls in "
                "flight at once (caller_in_flight_max); retry later"
            )
            with sync_channel(proxy.address) as other_channel:  # from 127.0.0.2
                assert status(ha_pb2_grpc.HAServiceStub(other_channel))() is not None
        finally:
            done.set()
            for stream in streams:
                stream.cancel()
        wait_until(
            lambda: code_of(status(flooder))[0] is grpc.StatusCode.OK,
            "the ended streams' slots to come back",
        )


@pytest.mark.parametrize(
    ("service", "setting", "message"),
    [
        ("store", "caller_in_flight_max=-1", "caller_in_flight_max must be >= 0 (0: no limit)"),
        ("ha", "caller_request_rate_per_s=-5", "caller_request_rate_per_s must be >= 0"),
        ("registry", "caller_request_burst=-1", "caller_request_burst must be >= 0"),
        ("registry", "caller_request_burst=0", "caller_request_burst must be >= 1 while"),
    ],
)
def test_bad_limits_stop_the_service_at_start(
    tmp_path: Path, service: str, setting: str, message: str
) -> None:
    settings = {"store": f"root_dir={tmp_path / 'store'}", "ha": "store_address=127.0.0.1:1"}
    extra = [settings[service]] if service in settings else []
    process = ServiceProcess(service, tmp_path / "logs", *extra, setting)
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    assert message in process.last_error()
    assert "Traceback" not in process.log()
