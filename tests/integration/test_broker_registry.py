"""The broker and its registry: the routes producers and consumers find.

An auto-created topic is routed by the time its first send returns, with no more queues
than the default topic grants; with auto-creation off an unknown topic is refused; a
topic's perm bits are enforced and announced; a killed broker expires from the routes and a
stopped one leaves at once; a broker made in-process registers the port it bound.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc

from boltmq.kernel.channels import channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from services.broker.config import BrokerConfig
from services.broker.server import create_server
from tests.integration.broker_fixtures import (
    DEADLINE_S,
    POLL_S,
    QUIET_REGISTER_MS,
    REGISTRY_EXPIRY_MS,
    STORE_SETTINGS,
    Cluster,
    Spawn,
    Stubs,
    failure,
    msg,
    pull,
    route_or_none,
    send,
    start_broker,
    upsert,
)
from tests.integration.broker_fixtures import cluster as cluster
from tests.integration.broker_fixtures import stubs as stubs


def test_auto_created_topic_is_in_the_route_when_the_send_returns(cluster: Cluster) -> None:
    assert route_or_none(cluster.routes, "fresh") is None
    result = send(cluster.stub, msg("fresh"), default_topic_queue_nums=2)[0]
    assert result.status == broker_pb2.SEND_OK
    route = route_or_none(cluster.routes, "fresh")
    assert route is not None
    assert [
        (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queues
    ] == [("broker-a", 2, 2, 6)]
    assert dict(route.brokers[0].addresses) == {0: cluster.broker.address}
    # More queues than TBW102's 8 are never granted.
    send(cluster.stub, msg("wide"), default_topic_queue_nums=64)
    wide = route_or_none(cluster.routes, "wide")
    assert wide is not None and wide.queues[0].write_queue_nums == 8


def test_auto_create_off_refuses_unknown_topics(
    cluster: Cluster, spawn: Spawn, stubs: Stubs
) -> None:
    strict = stubs.broker(
        start_broker(
            spawn,
            cluster.store,
            cluster.registry,
            "auto_create_topic_enable=false",
            "broker_name=strict",
        )
    )
    error = failure(strict.SendMessage, broker_pb2.SendRequest(messages=[msg("unknown-t")]))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown-t" in str(error.details())


def test_perm_bits_are_enforced_and_announced(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "read-only", perm=4)
    error = failure(stub.SendMessage, broker_pb2.SendRequest(messages=[msg("read-only")]))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "not writable" in str(error.details())
    assert pull(stub, "read-only").status != message_pb2.FOUND  # reading is allowed
    route = route_or_none(cluster.routes, "read-only")
    assert route is not None and route.queues[0].perm == 4

    upsert(stub, "write-only", perm=2)
    assert send(stub, msg("write-only"))[0].status == broker_pb2.SEND_OK
    error = failure(
        stub.PullMessage, broker_pb2.BrokerPullRequest(consumer_group="cg", topic="write-only")
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_killed_broker_leaves_the_routes_and_a_stopped_one_leaves_at_once(
    cluster: Cluster, spawn: Spawn
) -> None:
    send(cluster.stub, msg("gone"))
    assert route_or_none(cluster.routes, "gone") is not None
    cluster.broker.kill()
    deadline = time.monotonic() + DEADLINE_S
    while route_or_none(cluster.routes, "gone") is not None:
        assert time.monotonic() < deadline, "the registry still routes to a dead broker"
        time.sleep(POLL_S)

    second = start_broker(
        spawn, cluster.store, cluster.registry, f"register_interval_ms={QUIET_REGISTER_MS}"
    )
    assert route_or_none(cluster.routes, "gone") is not None
    assert second.stop() == 0
    assert route_or_none(cluster.routes, "gone") is None


def test_create_server_in_process_registers_its_bound_port(
    spawn: Spawn, stubs: Stubs, tmp_path: Path
) -> None:
    store = spawn("store", f"root_dir={tmp_path / 'store'}", *STORE_SETTINGS)
    registry = spawn("registry", f"broker_expiry_ms={REGISTRY_EXPIRY_MS}", "scan_interval_ms=100")
    routes = stubs.registry(registry)
    config = BrokerConfig(
        listen_port=0,
        store_address=store.address,
        registry_addresses=registry.address,
        broker_name="in-process",
    )

    async def scenario() -> tuple[str, list[str]]:
        server, port = await create_server(config)
        await server.start()
        address = f"127.0.0.1:{port}"
        async with channel(address) as chan:
            stub = broker_pb2_grpc.BrokerServiceStub(chan)
            await stub.SendMessage(broker_pb2.SendRequest(messages=[msg("local")]))
        route = route_or_none(routes, "local")
        await server.stop(None)
        return address, list(route.brokers[0].addresses.values()) if route else []

    address, announced = asyncio.run(scenario())
    assert announced == [address]
    assert route_or_none(routes, "local") is None  # unregistered when it stopped
