"""What the broker's integration tests share: a cluster of processes, stubs, and calls.

Each test starts a store (small segments) and a registry (short broker expiry) on port 0,
then one or more brokers pointed at them through ``--set``. Only public RPCs are used, so
every assertion is about what a producer, consumer or operator would see.

The fixtures ``cluster`` and ``stubs`` are imported by name into each test module that uses
them (``import cluster as cluster`` marks the re-export); ``cluster`` here stands in for the
whole-cluster fixture of tests/integration/conftest.py in those modules, and it asks for
``stubs``, so both are imported together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    message_pb2,
    registry_pb2,
    registry_pb2_grpc,
    store_pb2,
)
from tests.integration.procs import ServiceProcess

Spawn = Callable[..., ServiceProcess]

STORE_SETTINGS = (
    "mapped_file_size_commitlog=1048576",
    "mapped_file_size_consume_queue=20000",
    "max_hash_slot_num=1000",
    "max_index_num=4000",
    "max_message_size_bytes=8192",
)
BROKER_BODY_MAX = 16384
"""The broker admits bodies up to here; the store (8192) refuses the larger ones itself."""
REGISTRY_EXPIRY_MS = 1500
LONG_SUSPEND_MS = 20_000
"""A suspend (below the broker's 30 s cap) no test waits out: returning sooner means woken."""
QUIET_REGISTER_MS = 600_000
"""A broker with this interval registers only at start (and unregisters at stop)."""
RPC_TIMEOUT_S = 90.0
DEADLINE_S = 30.0
"""Generous bound for the registry's expiry to show; the test passes as soon as it does."""
POLL_S = 0.1


@dataclass
class Cluster:
    """One store, one registry, one broker, and stubs on them."""

    store: ServiceProcess
    registry: ServiceProcess
    broker: ServiceProcess
    stub: broker_pb2_grpc.BrokerServiceStub
    routes: registry_pb2_grpc.RegistryServiceStub


class Stubs:
    """Blocking stubs whose channels are closed at the end of the test."""

    def __init__(self) -> None:
        self.channels: list[grpc.Channel] = []

    def broker(self, proc: ServiceProcess) -> broker_pb2_grpc.BrokerServiceStub:
        self.channels.append(sync_channel(proc.address))
        return broker_pb2_grpc.BrokerServiceStub(self.channels[-1])

    def registry(self, proc: ServiceProcess) -> registry_pb2_grpc.RegistryServiceStub:
        self.channels.append(sync_channel(proc.address))
        return registry_pb2_grpc.RegistryServiceStub(self.channels[-1])


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    made = Stubs()
    yield made
    for chan in made.channels:
        chan.close()


def start_broker(
    spawn: Spawn, store: ServiceProcess, registry: ServiceProcess, *settings: str
) -> ServiceProcess:
    return spawn(
        "broker",
        f"store_address={store.address}",
        f"registry_addresses={registry.address}",
        "register_interval_ms=500",
        f"max_message_size_bytes={BROKER_BODY_MAX}",
        *settings,
    )


@pytest.fixture
def cluster(spawn: Spawn, stubs: Stubs, tmp_path: Path) -> Cluster:
    store = spawn("store", f"root_dir={tmp_path / 'store'}", *STORE_SETTINGS)
    registry = spawn("registry", f"broker_expiry_ms={REGISTRY_EXPIRY_MS}", "scan_interval_ms=100")
    broker = start_broker(spawn, store, registry)
    return Cluster(store, registry, broker, stubs.broker(broker), stubs.registry(registry))


def msg(
    topic: str, body: bytes = b"x", queue_id: int = -1, **fields: object
) -> message_pb2.Message:
    return message_pb2.Message(topic=topic, queue_id=queue_id, body=body, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SendOutcome:
    """One message's entry of a SendResponse's packed arrays."""

    status: int
    put_status: int
    msg_id: str
    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    error: str


def send(
    stub: broker_pb2_grpc.BrokerServiceStub, *messages: message_pb2.Message, **fields: object
) -> list[SendOutcome]:
    request = broker_pb2.SendRequest(producer_group="pg", messages=messages, **fields)  # type: ignore[arg-type]
    r = stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
    assert len(r.statuses) == len(r.put_statuses) == len(r.queue_offsets) == len(messages)
    return [
        SendOutcome(
            status,
            put,
            f"{r.msg_id_prefix}{offset:016X}" if offset >= 0 else "",
            r.topic,
            r.broker_name,
            r.queue_id,
            queue_offset,
            offset,
            r.errors.get(i, ""),
        )
        for i, (status, put, queue_offset, offset) in enumerate(
            zip(r.statuses, r.put_statuses, r.queue_offsets, r.commitlog_offsets, strict=True)
        )
    ]


def pull(
    stub: broker_pb2_grpc.BrokerServiceStub,
    topic: str,
    queue_id: int = 0,
    offset: int = 0,
    **fields: object,
) -> store_pb2.PullResponse:
    values: dict[str, object] = dict(
        consumer_group="cg",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_messages=32,
        commit_offset=-1,
    )
    values.update(fields)
    response: store_pb2.PullResponse = stub.PullMessage(
        broker_pb2.BrokerPullRequest(**values), timeout=RPC_TIMEOUT_S
    )  # type: ignore[arg-type]
    return response


def upsert(
    stub: broker_pb2_grpc.BrokerServiceStub, name: str, queues: int = 4, perm: int = 6
) -> None:
    stub.UpsertTopic(
        broker_pb2.UpsertTopicRequest(
            topic=registry_pb2.TopicConfig(
                name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm
            )
        ),
        timeout=RPC_TIMEOUT_S,
    )


def failure(call: Callable[..., object], request: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=RPC_TIMEOUT_S)
    return info.value


def route_or_none(
    routes: registry_pb2_grpc.RegistryServiceStub, topic: str
) -> registry_pb2.TopicRoute | None:
    try:
        route: registry_pb2.TopicRoute = routes.GetRoute(
            registry_pb2.GetRouteRequest(topic=topic), timeout=RPC_TIMEOUT_S
        )
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc.details()
        return None
    return route


def queue_pull(
    topic: str, queue_id: int, offset: int = 0, **fields: object
) -> broker_pb2.QueuePull:
    return broker_pb2.QueuePull(topic=topic, queue_id=queue_id, queue_offset=offset, **fields)  # type: ignore[arg-type]


EMPTY = (
    message_pb2.NO_MESSAGE_IN_QUEUE,
    message_pb2.OFFSET_OVERFLOW_ONE,
    message_pb2.NO_MATCHED_LOGIC_QUEUE,
)
"""What a pull that found nothing answers: an empty queue, the queue's end, or no queue."""
