"""Request rate, in-flight and concurrency limits of a real broker (RESOURCE_EXHAUSTED).

With access control on, a client is its access key, so two test clients on one
machine have separate budgets: the flooder is refused while the other keeps
being served. Without it the gRPC server's own ``max_concurrent_rpcs`` cap
is checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import Credentials, RequestSigner
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import ServiceProcess
from tests.integration.test_ha import wait_until
from tests.integration.test_metrics import free_port, scrape

FLOODER = Credentials("flooder-app", "flooder-secret")
OTHER = Credentials("other-app", "other-secret")
ACL = {
    "accounts": [
        {"accessKey": c.access_key, "secretKey": c.secret_key, "admin": True}
        for c in (FLOODER, OTHER)
    ]
}
TOPIC = "limits"
FLOOD_CALLS = 200


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    """``start_broker(*settings)``: registry, store and a broker with those settings."""
    log_dir = tmp_path / "logs"
    started = [ServiceProcess("registry", log_dir, *CLUSTER_REGISTRY_SETTINGS).start()]
    started.append(
        ServiceProcess(
            "store", log_dir, f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS
        ).start()
    )
    acl_file = tmp_path / "acl.json"
    acl_file.write_text(json.dumps(ACL))

    def factory(*settings: str) -> ServiceProcess:
        broker = ServiceProcess(
            "broker",
            log_dir,
            f"store_address={started[1].address}",
            f"registry_addresses={started[0].address}",
            *CLUSTER_BROKER_SETTINGS,
            f"acl_file={acl_file}",
            *settings,
        ).start()
        started.append(broker)
        return broker

    yield factory
    for proc in reversed(started):
        proc.stop()


def stub(
    broker: ServiceProcess, credentials: Credentials | None
) -> broker_pb2_grpc.BrokerServiceStub:
    channel = sync_channel(broker.address)
    if credentials is not None:
        channel = grpc.intercept_channel(channel, RequestSigner(credentials, "limits-test"))
    return broker_pb2_grpc.BrokerServiceStub(channel)


def info_code(client: broker_pb2_grpc.BrokerServiceStub) -> grpc.StatusCode:
    try:
        client.GetBrokerInfo(broker_pb2.GetBrokerInfoRequest(), timeout=5)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined,no-any-return]
    return grpc.StatusCode.OK


def parked_pull(client: broker_pb2_grpc.BrokerServiceStub) -> grpc.Future:
    """A pull past the end of queue 0: parked until its 20 s suspend timeout."""
    return client.PullMessage.future(
        broker_pb2.BrokerPullRequest(
            consumer_group="limits-group",
            topic=TOPIC,
            queue_id=0,
            queue_offset=1,
            max_messages=1,
            suspend_timeout_ms=20_000,
        ),
        timeout=30,
    )


def send_one(client: broker_pb2_grpc.BrokerServiceStub) -> None:
    client.SendMessage(
        broker_pb2.SendRequest(
            producer_group="p", messages=[message_pb2.Message(topic=TOPIC, queue_id=0, body=b"x")]
        ),
        timeout=5,
    )


def first_message_dispatched(client: broker_pb2_grpc.BrokerServiceStub) -> None:
    """Wait for offset 0 to be pullable: a pull at 1 before that is an overflow, not parked."""
    reply = client.PullMessage(
        broker_pb2.BrokerPullRequest(
            consumer_group="limits-group",
            topic=TOPIC,
            queue_id=0,
            queue_offset=0,
            max_messages=1,
            suspend_timeout_ms=10_000,
        ),
        timeout=15,
    )
    assert reply.status == 0, reply  # FOUND


def parked_pulls(metrics_port: int) -> float:
    """The broker's own count of parked pulls, read from its Prometheus endpoint.

    The test waits on it before probing: the pulls and a probe travel on separate
    HTTP/2 streams, and the server may take the probe first.
    """
    return scrape(metrics_port).get(("boltmq_broker_long_polls_parked", frozenset()), 0.0)


def test_a_flood_is_refused_while_other_clients_are_served(
    start_broker: Callable[..., ServiceProcess],
) -> None:
    broker = start_broker(
        "acl_enable=true", "client_request_rate_per_s=5", "client_request_burst=5"
    )
    flooder, other = stub(broker, FLOODER), stub(broker, OTHER)
    codes = [info_code(flooder) for _ in range(FLOOD_CALLS)]
    assert codes[0] == grpc.StatusCode.OK
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert info_code(other) == grpc.StatusCode.OK  # its own budget
    send_one(other)
    log = broker.log()
    assert "RESOURCE_EXHAUSTED" in log and "flooder-app" in log
    assert log.count("refused /boltmq.v1.BrokerService/GetBrokerInfo") < FLOOD_CALLS // 2


def test_parked_pulls_count_against_a_clients_in_flight_cap(
    start_broker: Callable[..., ServiceProcess],
) -> None:
    metrics_port = free_port()
    broker = start_broker(
        "acl_enable=true", "client_in_flight_max=2", f"metrics_port={metrics_port}"
    )
    flooder, other = stub(broker, FLOODER), stub(broker, OTHER)
    send_one(other)
    first_message_dispatched(other)
    pulls = [parked_pull(flooder) for _ in range(2)]
    try:
        wait_until(lambda: parked_pulls(metrics_port) == 2, "both pulls to be parked")
        assert info_code(flooder) == grpc.StatusCode.RESOURCE_EXHAUSTED  # the third call
        assert info_code(other) == grpc.StatusCode.OK
        assert not any(p.done() for p in pulls)  # the parked ones are unharmed
        send_one(other)  # wakes them: a message arrived
        for pull in pulls:
            assert pull.result(timeout=10).status == 0  # FOUND
        wait_until(
            lambda: info_code(flooder) == grpc.StatusCode.OK, "the flooder's slots to be given back"
        )
    finally:
        for pull in pulls:
            pull.cancel()


def test_calls_beyond_max_concurrent_rpcs_are_refused_by_the_server(
    start_broker: Callable[..., ServiceProcess],
) -> None:
    metrics_port = free_port()
    broker = start_broker(
        "max_concurrent_rpcs=3", "long_poll_max_parked=2", f"metrics_port={metrics_port}"
    )
    client = stub(broker, None)
    send_one(client)
    first_message_dispatched(client)
    pulls = [parked_pull(client) for _ in range(2)]  # two of the three slots, held
    wait_until(lambda: parked_pulls(metrics_port) == 2, "both pulls to be parked")

    def burst_refused() -> bool:
        """Eight calls at once on the one free slot: some must be refused."""
        calls = [
            client.GetBrokerInfo.future(broker_pb2.GetBrokerInfoRequest(), timeout=5)
            for _ in range(8)
        ]
        codes = [call.code() for call in calls]
        return grpc.StatusCode.RESOURCE_EXHAUSTED in codes

    try:
        wait_until(burst_refused, "a call beyond three in progress to be refused")
        assert not any(p.done() for p in pulls)  # the parked pulls kept their slots
    finally:
        for pull in pulls:
            pull.cancel()
    wait_until(lambda: info_code(client) == grpc.StatusCode.OK, "the server to serve again")


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            ("max_concurrent_rpcs=100", "long_poll_max_parked=100"),
            "long_poll_max_parked must be below max_concurrent_rpcs",
        ),
        (("client_request_burst=0",), "client_request_burst >= 1"),
        (("access_key=abcdefg",), "access_key and secret_key must be set together"),
        (("acl_file=/nonexistent/acl.json",), "acl_file: cannot read /nonexistent/acl.json"),
    ],
)
def test_bad_limit_and_acl_settings_stop_the_broker_with_one_line(
    tmp_path: Path, settings: tuple[str, ...], message: str
) -> None:
    process = ServiceProcess("broker", tmp_path / "logs", *settings)
    with pytest.raises(Exception, match="did not start"):
        process.start()
    assert message in process.last_error()
    assert "Traceback" not in process.log()
