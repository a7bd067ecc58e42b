"""The registry as a real process: registration, routes, expiry, independence, bad input.

Brokers are played by the test through :mod:`boltmq.kernel.registry_client` (the
client the broker and SDK use) and, where the exact gRPC status matters,
through the raw stub. The addresses brokers register need not be listening:
the registry never calls a broker.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from boltmq.kernel.registry_client import (
    AsyncRegistryClient,
    RegistryClient,
    RegistryRejected,
    RegistryUnavailable,
    TopicNotFound,
)
from boltmq.v1 import registry_pb2, registry_pb2_grpc
from tests.integration.procs import REPO_ROOT, ServiceProcess

Spawn = Callable[..., ServiceProcess]

CLUSTER = "DefaultCluster"
BROKER_A = "127.0.0.1:20911"
BROKER_A_REPLICA = "127.0.0.1:21911"
BROKER_B = "127.0.0.1:22911"
EXPIRY_MS = 1500
POLL_INTERVAL_S = 0.1
EXPIRY_DEADLINE_S = 30.0
"""Generous bound for the expiry to show; the test passes as soon as it does."""
RPC_TIMEOUT_S = 10.0
SUBPROCESS_TIMEOUT_S = 60


def topic(name: str, queues: int = 4, perm: int = 6) -> registry_pb2.TopicConfig:
    return registry_pb2.TopicConfig(
        name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm
    )


def client(*addresses: str) -> RegistryClient:
    """A client that gives up quickly on dead registries (tests need no long backoff)."""
    return RegistryClient(
        list(addresses),
        attempts_max=2,
        backoff_initial_s=0.05,
        backoff_max_s=0.2,
        rpc_timeout_s=RPC_TIMEOUT_S,
    )


@pytest.fixture
def stub_of() -> Iterator[Callable[[str], registry_pb2_grpc.RegistryServiceStub]]:
    channels: list[grpc.Channel] = []

    def factory(address: str) -> registry_pb2_grpc.RegistryServiceStub:
        channels.append(grpc.insecure_channel(address))
        return registry_pb2_grpc.RegistryServiceStub(channels[-1])

    yield factory
    for channel in channels:
        channel.close()


def stop_after_it_answered(proc: ServiceProcess) -> int | None:
    """SIGTERM once the process has answered a call; return its exit code.

    ``boltmq.kernel.runtime.serve`` prints READY just before it installs its signal
    handlers, so a SIGTERM sent the instant READY is read can still kill the
    process with the default action (exit -15). An answered call proves the
    event loop has reached ``stop.wait()``, past the handler installation.
    """
    with grpc.insecure_channel(proc.address) as channel:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT_S
        )
    return proc.stop()


def register_a(registry: RegistryClient, *topics: registry_pb2.TopicConfig) -> None:
    registry.register(
        cluster_name=CLUSTER,
        broker_name="broker-a",
        broker_id=0,
        address=BROKER_A,
        ha_address="127.0.0.1:20912",
        topics=topics,
        data_version=1,
    )


def register_b(registry: RegistryClient, *topics: registry_pb2.TopicConfig) -> None:
    registry.register(
        cluster_name=CLUSTER,
        broker_name="broker-b",
        broker_id=0,
        address=BROKER_B,
        topics=topics,
        data_version=5,
    )


def brokers_of(route: registry_pb2.TopicRoute) -> dict[str, dict[int, str]]:
    return {b.broker_name: dict(b.addresses) for b in route.brokers}


def live_names(registry: RegistryClient) -> list[tuple[str, int]]:
    return [(b.broker_name, b.broker_id) for b in registry.cluster_info().brokers]


def test_two_brokers_register_and_routes_follow_registration_and_unregistration(
    spawn: Spawn,
) -> None:
    proc = spawn("registry")
    with client(proc.address) as registry:
        register_a(registry, topic("orders", 8), topic("only-a", 2))
        registry.register(
            cluster_name=CLUSTER,
            broker_name="broker-a",
            broker_id=1,
            address=BROKER_A_REPLICA,
            topics=[topic("orders", 8, perm=4)],
        )
        register_b(registry, topic("orders", 4), topic("only-b", 1))

        orders = registry.get_route("orders")
        assert orders.topic == "orders"
        assert [
            (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in orders.queues
        ] == [("broker-a", 8, 8, 6), ("broker-b", 4, 4, 6)]
        assert brokers_of(orders) == {
            "broker-a": {0: BROKER_A, 1: BROKER_A_REPLICA},
            "broker-b": {0: BROKER_B},
        }
        assert [q.broker_name for q in registry.get_route("only-b").queues] == ["broker-b"]

        info = {(b.broker_name, b.broker_id): b for b in registry.cluster_info().brokers}
        assert sorted(info) == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
        assert (
            info["broker-a", 0].address,
            info["broker-a", 0].ha_address,
            info["broker-a", 0].topic_count,
            info["broker-a", 0].data_version,
        ) == (BROKER_A, "127.0.0.1:20912", 2, 1)
        assert info["broker-b", 0].data_version == 5
        assert all(b.last_update_ms > 0 and b.cluster_name == CLUSTER for b in info.values())

        result = registry.unregister(
            cluster_name=CLUSTER, broker_name="broker-b", broker_id=0, address=BROKER_B
        )
        assert result.accepted == (proc.address,)
        with pytest.raises(TopicNotFound, match="only-b"):
            registry.get_route("only-b")
        assert [q.broker_name for q in registry.get_route("orders").queues] == ["broker-a"]
        assert live_names(registry) == [("broker-a", 0), ("broker-a", 1)]


def test_get_routes_answers_many_topics_at_once_and_lists_the_unserved(spawn: Spawn) -> None:
    proc = spawn("registry")
    with client(proc.address) as registry:
        register_a(registry, topic("orders", 8), topic("only-a", 2))
        register_b(registry, topic("orders", 4), topic("only-b", 1))

        routes, missing = registry.get_routes(
            ["only-b", "orders", "nobody-serves-this", "orders", "only-a", "gone"]
        )

        assert list(routes) == ["only-b", "orders", "only-a"]  # asked order, once each
        assert missing == ["nobody-serves-this", "gone"]
        for name in routes:  # each the same route GetRoute answers
            assert routes[name] == registry.get_route(name)
        assert [(q.broker_name, q.read_queue_nums) for q in routes["orders"].queues] == [
            ("broker-a", 8),
            ("broker-b", 4),
        ]
        assert brokers_of(routes["only-b"]) == {"broker-b": {0: BROKER_B}}
        assert registry.get_routes([]) == ({}, [])  # nothing asked: no call

        many = [f"t-{n}" for n in range(5000)]  # more than one call's worth
        register_a(registry, *(topic(name, 1) for name in many[::2]))
        routes, missing = registry.get_routes(many)
        assert list(routes) == many[::2]
        assert missing == many[1::2]


def test_re_registration_replaces_the_topic_set_so_deleted_topics_disappear(spawn: Spawn) -> None:
    proc = spawn("registry")
    with client(proc.address) as registry:
        register_a(registry, topic("orders"), topic("doomed"))
        assert registry.get_route("doomed").queues

        register_a(registry, topic("orders"))

        with pytest.raises(TopicNotFound):
            registry.get_route("doomed")
        assert registry.get_route("orders").queues[0].broker_name == "broker-a"


def test_a_broker_that_stops_re_registering_disappears_after_the_expiry(spawn: Spawn) -> None:
    proc = spawn("registry", f"broker_expiry_ms={EXPIRY_MS}", "scan_interval_ms=200")
    with client(proc.address) as registry:
        register_a(registry, topic("orders"))
        register_b(registry, topic("orders"), topic("only-b"))
        assert live_names(registry) == [("broker-a", 0), ("broker-b", 0)]

        deadline = time.monotonic() + EXPIRY_DEADLINE_S
        while time.monotonic() < deadline:
            register_a(registry, topic("orders"))  # broker-a keeps its heartbeat
            if ("broker-b", 0) not in live_names(registry):
                break
            time.sleep(POLL_INTERVAL_S)

        assert live_names(registry) == [("broker-a", 0)], "broker-b never expired"
        with pytest.raises(TopicNotFound):
            registry.get_route("only-b")
        assert brokers_of(registry.get_route("orders")) == {"broker-a": {0: BROKER_A}}

        register_b(registry, topic("only-b"))  # a broker that comes back is routed again
        assert brokers_of(registry.get_route("only-b")) == {"broker-b": {0: BROKER_B}}


def test_two_registries_side_by_side_hold_independent_state(spawn: Spawn) -> None:
    first, second = spawn("registry"), spawn("registry")
    with (
        client(first.address) as only_first,
        client(second.address) as only_second,
        client(second.address, first.address) as both,
    ):
        register_a(only_first, topic("orders"))

        assert live_names(only_second) == []
        with pytest.raises(TopicNotFound):
            only_second.get_route("orders")
        # A client of both asks the next registry when one does not know the topic.
        assert brokers_of(both.get_route("orders")) == {"broker-a": {0: BROKER_A}}
        register_b(only_second, topic("only-b"))
        routes, missing = both.get_routes(["orders", "only-b", "neither"])
        assert {name: brokers_of(route) for name, route in routes.items()} == {
            "orders": {"broker-a": {0: BROKER_A}},
            "only-b": {"broker-b": {0: BROKER_B}},
        }
        assert missing == ["neither"]
        only_second.unregister(
            cluster_name=CLUSTER, broker_name="broker-b", broker_id=0, address=BROKER_B
        )

        result = both.register(
            cluster_name=CLUSTER,
            broker_name="broker-b",
            broker_id=0,
            address=BROKER_B,
            topics=[topic("only-b")],
        )
        assert sorted(result.accepted) == sorted([first.address, second.address])
        assert live_names(only_second) == [("broker-b", 0)]
        assert live_names(only_first) == [("broker-a", 0), ("broker-b", 0)]

        only_first.unregister(
            cluster_name=CLUSTER, broker_name="broker-b", broker_id=0, address=BROKER_B
        )
        assert live_names(only_first) == [("broker-a", 0)]
        assert live_names(only_second) == [("broker-b", 0)]


def _register_request(**changes: object) -> registry_pb2.RegisterBrokerRequest:
    request = registry_pb2.RegisterBrokerRequest(
        cluster_name=CLUSTER,
        broker_name="broker-a",
        broker_id=0,
        address=BROKER_A,
        topics=[topic("orders")],
    )
    for name, value in changes.items():
        if name == "topics":
            del request.topics[:]
            request.topics.extend(value)  # type: ignore[arg-type]
        else:
            setattr(request, name, value)
    return request


BAD_REGISTRATIONS: list[tuple[dict[str, object], str]] = [
    ({"broker_name": ""}, "broker_name"),
    ({"cluster_name": ""}, "cluster_name"),
    ({"address": ""}, "address"),
    ({"address": "no-port"}, "address"),
    ({"broker_id": -1}, "broker_id"),
    ({"ha_address": "host:notaport"}, "ha_address"),
    ({"topics": [topic("ok"), topic("../../etc/passwd")]}, "topics[1].name"),
    ({"topics": [topic("a.b")]}, "topics[0].name"),
    ({"topics": [topic("x" * 128)]}, "topics[0].name"),
    ({"topics": [topic("t", queues=-1)]}, "topics[0].read_queue_nums"),
    ({"topics": [topic("t", perm=9)]}, "topics[0].perm"),
]


def test_bad_inputs_get_invalid_argument_naming_the_field_or_not_found(
    spawn: Spawn, stub_of: Callable[[str], registry_pb2_grpc.RegistryServiceStub]
) -> None:
    proc = spawn("registry")
    stub = stub_of(proc.address)
    for changes, field in BAD_REGISTRATIONS:
        with pytest.raises(grpc.RpcError) as caught:
            stub.RegisterBroker(_register_request(**changes), timeout=RPC_TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, changes
        assert caught.value.details().startswith(f"{field}: "), caught.value.details()

    for unregister in (
        registry_pb2.UnregisterBrokerRequest(cluster_name=CLUSTER, broker_id=0, address=BROKER_A),
        registry_pb2.UnregisterBrokerRequest(
            cluster_name=CLUSTER, broker_name="broker-a", broker_id=0
        ),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            stub.UnregisterBroker(unregister, timeout=RPC_TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    for name in ("", "../x", "a" * 200):
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetRoute(registry_pb2.GetRouteRequest(topic=name), timeout=RPC_TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("topic: ")

    for topics, field in (
        ([], "topics"),
        (["ok"] * 4097, "topics"),
        (["ok", "../x"], "topics[1]"),
        (["a" * 200], "topics[0]"),
        (["ok", "", "fine"], "topics[1]"),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetRoutes(registry_pb2.GetRoutesRequest(topics=topics), timeout=RPC_TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, topics[:3]
        assert caught.value.details().startswith(f"{field}: "), caught.value.details()
    with client(proc.address) as registry, pytest.raises(RegistryRejected, match=r"topics\[0\]"):
        registry.get_routes(["bad/name"])
    assert stub.GetRoutes(
        registry_pb2.GetRoutesRequest(topics=["nobody-serves-this"]), timeout=RPC_TIMEOUT_S
    ).missing == ["nobody-serves-this"]

    with pytest.raises(grpc.RpcError) as caught:
        stub.GetRoute(
            registry_pb2.GetRouteRequest(topic="nobody-serves-this"), timeout=RPC_TIMEOUT_S
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nobody-serves-this" in caught.value.details()
    assert "no live broker" in caught.value.details()

    # Nothing bad was stored, and the client surfaces the rejection as a named error.
    assert (
        stub.GetClusterInfo(registry_pb2.GetClusterInfoRequest(), timeout=RPC_TIMEOUT_S).brokers
        == []
    )
    with client(proc.address) as registry, pytest.raises(RegistryRejected, match="broker_id"):
        registry.register(
            cluster_name=CLUSTER, broker_name="broker-a", broker_id=-3, address=BROKER_A
        )


def test_health_is_serving_and_sigterm_exits_zero(spawn: Spawn) -> None:
    proc = spawn("registry")
    with grpc.insecure_channel(proc.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "boltmq.v1.RegistryService"):
            response = health.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT_S
            )
            assert response.status == health_pb2.HealthCheckResponse.SERVING

    assert stop_after_it_answered(proc) == 0
    assert "Traceback" not in proc.log()


def test_clients_fail_over_past_a_stopped_registry_and_name_total_failure(spawn: Spawn) -> None:
    dead, live = spawn("registry"), spawn("registry")
    assert stop_after_it_answered(dead) == 0

    with client(dead.address, live.address) as registry:
        result = registry.register(
            cluster_name=CLUSTER,
            broker_name="broker-a",
            broker_id=0,
            address=BROKER_A,
            topics=[topic("orders")],
        )
        assert result.accepted == (live.address,)
        assert list(result.failed) == [dead.address]
        assert brokers_of(registry.get_route("orders")) == {"broker-a": {0: BROKER_A}}

        assert list(registry.get_routes(["orders"])[0]) == ["orders"]

    with client(dead.address) as registry:
        with pytest.raises(RegistryUnavailable) as caught:
            registry.get_route("orders")
        assert dead.address in caught.value.errors
        with pytest.raises(RegistryUnavailable) as caught:
            registry.get_routes(["orders"])
        assert dead.address in caught.value.errors
        with pytest.raises(RegistryUnavailable):
            register_a(registry, topic("orders"))


def test_async_client_registers_with_every_registry_and_looks_up_routes(spawn: Spawn) -> None:
    first, second, dead = spawn("registry"), spawn("registry"), spawn("registry")
    assert stop_after_it_answered(dead) == 0

    async def scenario() -> None:
        async with AsyncRegistryClient(
            [first.address, dead.address, second.address],
            attempts_max=2,
            backoff_initial_s=0.05,
            backoff_max_s=0.2,
        ) as registry:
            result = await registry.register(
                cluster_name=CLUSTER,
                broker_name="broker-a",
                broker_id=0,
                address=BROKER_A,
                topics=[topic("orders", 6)],
                data_version=3,
            )
            assert sorted(result.accepted) == sorted([first.address, second.address])
            assert list(result.failed) == [dead.address]

            route = await registry.get_route("orders")
            assert [q.write_queue_nums for q in route.queues] == [6]
            info = await registry.cluster_info()
            assert [(b.broker_name, b.data_version) for b in info.brokers] == [("broker-a", 3)]
            with pytest.raises(TopicNotFound):
                await registry.get_route("unknown")
            with pytest.raises(RegistryRejected, match="topic"):
                await registry.get_route("bad/topic")

            await registry.unregister(
                cluster_name=CLUSTER, broker_name="broker-a", broker_id=0, address=BROKER_A
            )
            with pytest.raises(TopicNotFound):
                await registry.get_route("orders")

    asyncio.run(scenario())

    for proc in (first, second):
        with client(proc.address) as registry:
            assert live_names(registry) == []


def test_a_bad_setting_is_one_clear_line_and_a_non_zero_exit() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "boltmq.cli",
            "serve",
            "registry",
            "--port",
            "0",
            "--set",
            "broker_expiry_ms=0",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )

    assert done.returncode != 0
    assert "broker_expiry_ms must be positive" in done.stderr
    assert "Traceback" not in done.stderr
