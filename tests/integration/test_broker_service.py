"""The broker end to end: real store, registry and broker processes spoken to over gRPC.

Each test starts a store (small segments) and a registry (short broker
expiry) on port 0, then one or more brokers pointed at them through
``--set``. Only public RPCs are used, so every assertion is about what a
producer, consumer or operator would see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import channel, sync_channel
from boltmq.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    message_pb2,
    registry_pb2,
    registry_pb2_grpc,
    store_pb2,
)
from boltmq.wire.record import decode_records
from services.broker.config import BrokerConfig
from services.broker.server import create_server
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


# ===================================================================== send & pull
def test_send_then_pull_round_trip_with_tags(cluster: Cluster) -> None:
    stub = cluster.stub
    results = send(stub, msg("orders", b"a1", 0, tags="A", keys=["k-1"]))
    results += send(stub, msg("orders", b"b1", 0, tags="B"))
    results += send(stub, msg("orders", b"a2", 0, tags="A", properties={"p": "v"}))
    assert [r.status for r in results] == [broker_pb2.SEND_OK] * 3
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert {(r.topic, r.broker_name, r.queue_id) for r in results} == {("orders", "broker-a", 0)}
    assert all(r.msg_id and r.put_status == message_pb2.PUT_OK for r in results)

    tagged = pull(stub, "orders", subscription="A")
    assert tagged.status == message_pb2.FOUND
    assert [m.body for m in tagged.messages] == [b"a1", b"a2"]
    assert tagged.messages[1].properties["p"] == "v"
    everything = pull(stub, "orders", subscription="A || B")
    assert [m.body for m in everything.messages] == [b"a1", b"b1", b"a2"]
    assert everything.next_begin_offset == 3
    raw = pull(stub, "orders", raw_records=True)
    assert raw.record_count == 3 and len(raw.records) > 0 and not raw.messages

    viewed = stub.ViewMessage(store_pb2.GetRequest(msg_id=results[0].msg_id))
    assert viewed.found and viewed.message.body == b"a1"
    by_offset = stub.ViewMessage(store_pb2.GetRequest(commitlog_offset=results[1].commitlog_offset))
    assert by_offset.message.body == b"b1"
    found = stub.QueryMessageByKey(store_pb2.QueryByKeyRequest(topic="orders", key="k-1"))
    assert [m.body for m in found.messages] == [b"a1"]


def test_a_raw_pull_answer_is_the_stores_encoding_with_the_records_last_forwarded_as_is(
    cluster: Cluster,
) -> None:
    bodies = [b"first", b"x" * 3000, b"z"]
    send(cluster.stub, *(msg("orders", body, 1) for body in bodies))
    request = broker_pb2.BrokerPullRequest(
        consumer_group="cg",
        topic="orders",
        queue_id=1,
        max_messages=32,
        raw_records=True,
        commit_offset=-1,
    )
    as_sent: dict[str, bytes] = {}
    for name, address, method, message in (
        ("broker", cluster.broker.address, "/boltmq.v1.BrokerService/PullMessage", request),
        (
            "store",
            cluster.store.address,
            "/boltmq.v1.StoreService/Pull",
            store_pb2.PullRequest(topic="orders", queue_id=1, max_messages=32, raw_records=True),
        ),
    ):
        with sync_channel(address) as chan:  # no response deserializer: the bytes as sent
            as_sent[name] = chan.unary_unary(
                method, request_serializer=type(message).SerializeToString
            )(message, timeout=RPC_TIMEOUT_S)
    assert as_sent["broker"] == as_sent["store"]
    parsed = store_pb2.PullResponse.FromString(as_sent["broker"])
    assert parsed.status == message_pb2.FOUND and parsed.record_count == 3
    assert as_sent["broker"].endswith(parsed.records)  # one join: head, then the records
    assert [bytes(r.body) for r in decode_records(parsed.records)] == bodies


def queue_pull(
    topic: str, queue_id: int, offset: int = 0, **fields: object
) -> broker_pb2.QueuePull:
    return broker_pb2.QueuePull(topic=topic, queue_id=queue_id, queue_offset=offset, **fields)  # type: ignore[arg-type]


def test_pull_queues_answers_each_queue_as_the_store_does_and_commits_offsets(
    cluster: Cluster,
) -> None:
    stub = cluster.stub
    upsert(stub, "orders", queues=4)
    upsert(stub, "audit", queues=2)
    send(stub, *(msg("orders", f"o1-{n}".encode(), 1) for n in range(3)))
    send(stub, msg("audit", b"a0", 0))
    request = broker_pb2.BrokerPullQueuesRequest(
        consumer_group="cg",
        max_messages=2,
        pulls=[
            queue_pull("audit", 0),
            queue_pull("orders", 1, 1, commit_offset=1),
            queue_pull("orders", 3),
        ],
    )
    with sync_channel(cluster.broker.address) as chan:  # the bytes as the broker sent them
        encoded = chan.unary_unary(
            "/boltmq.v1.BrokerService/PullQueues",
            request_serializer=(broker_pb2.BrokerPullQueuesRequest.SerializeToString),
        )(request, timeout=RPC_TIMEOUT_S)
    answer = store_pb2.PullQueuesResponse.FromString(encoded)
    assert [[bytes(r.body) for r in decode_records(a.records)] for a in answer.answers] == [
        [b"a0"],
        [b"o1-1", b"o1-2"],
        [],
    ]
    assert [a.status for a in answer.answers][:2] == [message_pb2.FOUND] * 2
    assert answer.answers[2].status in EMPTY
    with sync_channel(cluster.store.address) as chan:  # forwarded as the store answered
        assert encoded == chan.unary_unary(
            "/boltmq.v1.StoreService/PullQueues",
            request_serializer=store_pb2.PullQueuesRequest.SerializeToString,
        )(
            store_pb2.PullQueuesRequest(
                pulls=[
                    store_pb2.PullRequest(
                        topic=p.topic,
                        queue_id=p.queue_id,
                        queue_offset=p.queue_offset,
                        max_messages=2,
                        raw_records=True,
                    )
                    for p in request.pulls
                ]
            ),
            timeout=RPC_TIMEOUT_S,
        )
    committed = stub.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="cg", topic="orders", queue_id=1),
        timeout=RPC_TIMEOUT_S,
    )
    assert (committed.found, committed.offset) == (True, 1)


def test_a_parked_pull_of_several_queues_is_woken_by_a_send_to_any(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "wake", queues=3)
    started = time.monotonic()
    parked = stub.PullQueues.future(
        broker_pb2.BrokerPullQueuesRequest(
            consumer_group="cg",
            suspend_timeout_ms=LONG_SUSPEND_MS,
            pulls=[queue_pull("wake", n) for n in range(3)],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    time.sleep(0.5)  # let the pull reach the store and park; it must still be waiting
    assert not parked.done(), "empty queues answered at once instead of parking"
    send(stub, msg("wake", b"hello", 2))
    answer = parked.result()
    assert (time.monotonic() - started) * 1000 < LONG_SUSPEND_MS, "not woken by the send"
    assert [a.record_count for a in answer.answers] == [0, 0, 1]
    assert [bytes(r.body) for r in decode_records(answer.answers[2].records)] == [b"hello"]


def test_quiet_queues_pulled_again_answer_as_the_store_and_show_the_next_arrival(
    cluster: Cluster,
) -> None:
    """After a parked PullQueues times out, the broker answers the queues the store still
    watches without asking it again: the answers must be the store's own, and a message
    sent after them must show up in the next pull."""
    stub = cluster.stub
    upsert(stub, "hush", queues=3)
    send(stub, msg("hush", b"first", 0))
    pulls = [queue_pull("hush", 0, 1), queue_pull("hush", 1), queue_pull("hush", 2)]
    request = broker_pb2.BrokerPullQueuesRequest(
        consumer_group="cg", pulls=pulls, suspend_timeout_ms=300
    )
    with sync_channel(cluster.store.address) as chan:
        from_store = store_pb2.PullQueuesResponse.FromString(
            chan.unary_unary(
                "/boltmq.v1.StoreService/PullQueues",
                request_serializer=store_pb2.PullQueuesRequest.SerializeToString,
            )(
                store_pb2.PullQueuesRequest(
                    pulls=[
                        store_pb2.PullRequest(
                            topic=p.topic,
                            queue_id=p.queue_id,
                            queue_offset=p.queue_offset,
                            raw_records=True,
                        )
                        for p in pulls
                    ]
                ),
                timeout=RPC_TIMEOUT_S,
            )
        )
    assert [a.status for a in from_store.answers][0] == message_pb2.OFFSET_OVERFLOW_ONE
    for _ in range(3):  # the first parks and times out; the others find every queue watched
        assert stub.PullQueues(request, timeout=RPC_TIMEOUT_S) == from_store
    send(stub, msg("hush", b"second", 1))
    answer = stub.PullQueues(request, timeout=RPC_TIMEOUT_S)
    assert [a.record_count for a in answer.answers] == [0, 1, 0]
    assert [bytes(r.body) for r in decode_records(answer.answers[1].records)] == [b"second"]
    assert (answer.answers[0], answer.answers[2]) == (from_store.answers[0], from_store.answers[2])
    send(stub, msg("hush", b"third", 0))  # a queue answered from what was kept, then written
    answer = stub.PullQueues(request, timeout=RPC_TIMEOUT_S)
    assert [bytes(r.body) for r in decode_records(answer.answers[0].records)] == [b"third"]


def test_a_batch_is_appended_whole_to_one_queue_and_queues_rotate(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "batch", queues=3)
    first = send(stub, *(msg("batch", f"m{i}".encode()) for i in range(50)))
    assert len(first) == 50 and {r.status for r in first} == {broker_pb2.SEND_OK}
    assert len({r.queue_id for r in first}) == 1
    assert [r.queue_offset for r in first] == list(range(50))
    queues = [first[0].queue_id] + [send(stub, msg("batch"))[0].queue_id for _ in range(3)]
    assert sorted(queues[:3]) == [0, 1, 2] and queues[3] == queues[0]
    got = pull(stub, "batch", first[0].queue_id, max_messages=64)
    assert [m.body for m in got.messages][:50] == [f"m{i}".encode() for i in range(50)]


def test_store_refusals_become_send_failed_with_the_put_status(cluster: Cluster) -> None:
    # 10 000 bytes passes the broker's limit but not the store's 8192.
    results = send(cluster.stub, msg("orders", b"z" * 10_000, 0))
    assert results[0].status == broker_pb2.SEND_FAILED
    assert results[0].put_status == message_pb2.MESSAGE_ILLEGAL
    assert results[0].error
    assert pull(cluster.stub, "orders").status != message_pb2.FOUND


# ===================================================================== long polling
def test_a_parked_pull_is_woken_by_a_send(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "wake", queues=1)
    started = time.monotonic()
    parked = stub.PullMessage.future(
        broker_pb2.BrokerPullRequest(
            consumer_group="cg",
            topic="wake",
            queue_id=0,
            queue_offset=0,
            max_messages=8,
            suspend_timeout_ms=LONG_SUSPEND_MS,
            commit_offset=-1,
        ),
        timeout=RPC_TIMEOUT_S,
    )
    time.sleep(0.5)  # let the pull reach the store and park; it must still be waiting
    assert not parked.done(), "an empty queue answered at once instead of parking"
    send(stub, msg("wake", b"hello", 0))
    response = parked.result()
    elapsed_ms = (time.monotonic() - started) * 1000
    assert response.status == message_pb2.FOUND
    assert [m.body for m in response.messages] == [b"hello"]
    assert elapsed_ms < LONG_SUSPEND_MS, "the pull was not woken; it waited out its suspend"


EMPTY = (
    message_pb2.NO_MESSAGE_IN_QUEUE,
    message_pb2.OFFSET_OVERFLOW_ONE,
    message_pb2.NO_MATCHED_LOGIC_QUEUE,
)


def test_an_unwoken_pull_times_out_with_the_empty_status(cluster: Cluster) -> None:
    upsert(cluster.stub, "quiet", queues=1)
    send(cluster.stub, msg("quiet", b"one", 0))
    response = pull(cluster.stub, "quiet", offset=1, suspend_timeout_ms=200)
    assert response.status == message_pb2.OFFSET_OVERFLOW_ONE
    assert not response.messages and response.next_begin_offset == 1


def test_stopping_the_broker_answers_parked_pulls(cluster: Cluster) -> None:
    upsert(cluster.stub, "quiet", queues=1)
    parked = cluster.stub.PullMessage.future(
        broker_pb2.BrokerPullRequest(
            consumer_group="cg",
            topic="quiet",
            queue_id=0,
            suspend_timeout_ms=LONG_SUSPEND_MS,
            commit_offset=-1,
        ),
        timeout=RPC_TIMEOUT_S,
    )
    time.sleep(0.5)  # let the pull park
    assert not parked.done()
    assert cluster.broker.stop() == 0
    # Answered with its empty status, not cancelled at the end of the grace period.
    response = parked.result()
    assert response.status in EMPTY and not response.messages


# ===================================================================== offsets & restart
def test_committed_offsets_and_topics_survive_a_broker_restart(
    cluster: Cluster, spawn: Spawn, stubs: Stubs
) -> None:
    stub = cluster.stub
    send(stub, *(msg("durable", b"m", 1) for _ in range(5)))
    stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(group="cg", topic="durable", queue_id=1, offset=3)
    )
    pull(stub, "durable", queue_id=0, commit_offset=7, consumer_group="other")
    assert cluster.broker.stop() == 0

    restarted = stubs.broker(start_broker(spawn, cluster.store, cluster.registry))
    answer = restarted.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="cg", topic="durable", queue_id=1)
    )
    assert (answer.found, answer.offset) == (True, 3)
    other = restarted.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="other", topic="durable", queue_id=0)
    )
    assert (other.found, other.offset) == (True, 7)
    never = restarted.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="cg", topic="durable", queue_id=0)
    )
    assert not never.found
    batch = restarted.QueryConsumerOffsets(
        broker_pb2.QueryConsumerOffsetsRequest(
            group="cg", queues=[broker_pb2.QueueId(topic="durable", queue_id=n) for n in (1, 0, 1)]
        )
    )
    assert [(o.found, o.offset) for o in batch.offsets] == [(True, 3), (False, -1), (True, 3)]
    assert len(pull(restarted, "durable", queue_id=1).messages) == 5
    progress = restarted.GroupProgress(broker_pb2.GroupProgressRequest(group="cg")).queues
    queue1 = next(q for q in progress if q.queue_id == 1)
    assert (queue1.broker_offset, queue1.consumer_offset, queue1.lag) == (5, 3, 2)


# ===================================================================== registry
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


# ===================================================================== groups & admin
def test_groups_members_locks_topics_and_progress(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "shared", queues=2)
    for client_id in ("c-2", "c-1"):
        stub.Heartbeat(
            broker_pb2.HeartbeatRequest(
                client_id=client_id,
                consumer_groups=[
                    broker_pb2.ConsumerGroupHeartbeat(
                        group="g1",
                        model="CLUSTERING",
                        orderly=True,
                        subscriptions=[
                            broker_pb2.ConsumerSubscription(topic="shared", expression="*")
                        ],
                    )
                ],
            )
        )
    members = stub.GetConsumerList(broker_pb2.GetConsumerListRequest(group="g1")).client_ids
    assert list(members) == ["c-1", "c-2"]
    q0, q1 = (broker_pb2.QueueId(topic="shared", queue_id=i) for i in (0, 1))
    locked = stub.LockQueues(broker_pb2.LockQueuesRequest(group="g1", client_id="c-1", queues=[q0]))
    assert list(locked.locked) == [q0]
    refused = stub.LockQueues(
        broker_pb2.LockQueuesRequest(group="g1", client_id="c-2", queues=[q0, q1])
    )
    assert list(refused.locked) == [q1]
    stub.UnregisterClient(
        broker_pb2.UnregisterClientRequest(client_id="c-1", consumer_groups=["g1"])
    )
    assert list(stub.GetConsumerList(broker_pb2.GetConsumerListRequest(group="g1")).client_ids) == [
        "c-2"
    ]
    taken = stub.LockQueues(broker_pb2.LockQueuesRequest(group="g1", client_id="c-2", queues=[q0]))
    assert list(taken.locked) == [q0]

    groups = {g.group: g for g in stub.ListGroups(broker_pb2.ListGroupsRequest()).groups}
    assert list(groups["g1"].client_ids) == ["c-2"] and groups["g1"].orderly
    send(stub, msg("shared", b"1", 1), msg("shared", b"2", 1))
    status = stub.TopicStatus(broker_pb2.TopicStatusRequest(topic="shared")).queues
    assert [(q.queue_id, q.max_offset) for q in status] == [(0, 0), (1, 2)]
    progress = stub.GroupProgress(broker_pb2.GroupProgressRequest(group="g1")).queues
    assert [(q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in progress] == [
        (0, 0, -1, 0),
        (1, 2, -1, 2),
    ]

    names = {t.name for t in stub.ListTopics(broker_pb2.ListTopicsRequest()).topics}
    assert {
        "shared",
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "DefaultCluster",
        "broker-a",
    } <= names
    stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic="shared"))
    assert (
        failure(stub.TopicStatus, broker_pb2.TopicStatusRequest(topic="shared")).code()
        == grpc.StatusCode.NOT_FOUND
    )
    assert route_or_none(cluster.routes, "shared") is None
    info = stub.GetBrokerInfo(broker_pb2.GetBrokerInfoRequest())
    assert (info.broker_name, info.address, info.store_address) == (
        "broker-a",
        cluster.broker.address,
        cluster.store.address,
    )
    assert info.store.role == "MASTER"


# ===================================================================== bad input
def bad_requests() -> list[tuple[str, object, grpc.StatusCode, str]]:
    """(rpc, request, code, text the details must contain)."""
    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    pull_base: dict[str, object] = dict(consumer_group="cg", topic="orders")
    return [
        ("SendMessage", broker_pb2.SendRequest(), invalid, "messages:"),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("../etc")]),
            invalid,
            "messages[0].topic",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders"), msg("other")]),
            invalid,
            "messages[1].topic",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", queue_id=0), msg("orders", queue_id=1)]),
            invalid,
            "messages[1].queue_id",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", b"")]),
            invalid,
            "messages[0].body",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", b"x" * 20_000)]),
            invalid,
            "messages[0].body",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("orders", queue_id=4)]),
            invalid,
            "messages[0].queue_id",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(producer_group="p/g", messages=[msg("orders")]),
            invalid,
            "producer_group",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[msg("TBW102")]),
            grpc.StatusCode.PERMISSION_DENIED,
            "system topic",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="cg", topic="nope"),
            not_found,
            "topic",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(**pull_base, queue_id=9),  # type: ignore
            invalid,
            "queue_id",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(**pull_base, queue_offset=-1),  # type: ignore
            invalid,
            "queue_offset",
        ),
        ("PullMessage", broker_pb2.BrokerPullRequest(topic="orders"), invalid, "consumer_group"),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(**pull_base, subscription="A ||"),  # type: ignore
            invalid,
            "subscription",
        ),
        ("PullQueues", broker_pb2.BrokerPullQueuesRequest(consumer_group="cg"), invalid, "pulls:"),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", n % 4, n) for n in range(1025)]
            ),
            invalid,
            "pulls:",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0), queue_pull("nope", 0)]
            ),
            not_found,
            "pulls[1].topic",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 9)]
            ),
            invalid,
            "pulls[0].queue_id",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0, -1)]
            ),
            invalid,
            "pulls[0].queue_offset",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0, subscription="A ||")]
            ),
            invalid,
            "pulls[0].subscription",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", pulls=[queue_pull("orders", 0), queue_pull("orders", 0, 5)]
            ),
            invalid,
            "pulls[1]: queue orders:0 is pulls[0] already",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="cg", max_bytes=-1, pulls=[queue_pull("orders", 0)]
            ),
            invalid,
            "max_bytes",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(pulls=[queue_pull("orders", 0)]),
            invalid,
            "consumer_group",
        ),
        ("Heartbeat", broker_pb2.HeartbeatRequest(), invalid, "client_id"),
        (
            "Heartbeat",
            broker_pb2.HeartbeatRequest(
                client_id="c",
                consumer_groups=[broker_pb2.ConsumerGroupHeartbeat(group="g", model="SOMETIMES")],
            ),
            invalid,
            "consumer_groups[0].model",
        ),
        (
            "UpdateConsumerOffset",
            broker_pb2.UpdateConsumerOffsetRequest(group="g", topic="orders", offset=-5),
            invalid,
            "offset",
        ),
        (
            "QueryConsumerOffset",
            broker_pb2.QueryConsumerOffsetRequest(group="g", topic="nope"),
            not_found,
            "topic",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(group="g"),
            invalid,
            "queues: must name at least one queue",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g", queues=[broker_pb2.QueueId(topic="orders", queue_id=0)] * 4097
            ),
            invalid,
            "at most 4096",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                queues=[broker_pb2.QueueId(topic="orders", queue_id=0)]
            ),
            invalid,
            "group",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g",
                queues=[
                    broker_pb2.QueueId(topic="orders", queue_id=0),
                    broker_pb2.QueueId(topic="nope", queue_id=0),
                ],
            ),
            not_found,
            "queues[1].topic",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g", queues=[broker_pb2.QueueId(topic="orders", queue_id=4)]
            ),
            invalid,
            "queues[0].queue_id",
        ),
        (
            "LockQueues",
            broker_pb2.LockQueuesRequest(
                group="g", client_id="c", queues=[broker_pb2.QueueId(topic="orders", queue_id=-1)]
            ),
            invalid,
            "queues[0].queue_id",
        ),
        (
            "UpsertTopic",
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name="t", read_queue_nums=0, write_queue_nums=1, perm=6
                )
            ),
            invalid,
            "topic.read_queue_nums",
        ),
        (
            "UpsertTopic",
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name="t", read_queue_nums=1, write_queue_nums=1, perm=9
                )
            ),
            invalid,
            "topic.perm",
        ),
        (
            "UpsertTopic",
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name="TBW102", read_queue_nums=1, write_queue_nums=1, perm=6
                )
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
            "system topic",
        ),
        ("DeleteTopic", broker_pb2.DeleteTopicRequest(topic="nope"), not_found, "topic"),
        ("TopicStatus", broker_pb2.TopicStatusRequest(topic="a b"), invalid, "topic"),
        ("GroupProgress", broker_pb2.GroupProgressRequest(group="never-seen"), not_found, "group"),
        ("ViewMessage", store_pb2.GetRequest(), invalid, "by"),
        ("QueryMessageByKey", store_pb2.QueryByKeyRequest(topic="orders"), invalid, "key"),
    ]


def test_every_bad_input_gets_a_clear_error(cluster: Cluster) -> None:
    upsert(cluster.stub, "orders", queues=4)
    for rpc, request, code, text in bad_requests():
        error = failure(getattr(cluster.stub, rpc), request)
        assert error.code() == code, (rpc, request, error.details())
        assert text in str(error.details()), (rpc, error.details())


def test_an_unreachable_store_is_unavailable_with_its_address(cluster: Cluster) -> None:
    upsert(cluster.stub, "orders")
    cluster.store.kill()
    error = failure(cluster.stub.SendMessage, broker_pb2.SendRequest(messages=[msg("orders")]))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert f"store at {cluster.store.address}" in str(error.details())


def test_a_broker_without_its_store_exits_with_one_clear_line(spawn: Spawn, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as info:
        spawn(
            "broker",
            "store_address=127.0.0.1:1",
            "registry_addresses=",
            "store_connect_timeout_ms=300",
        )
    log = str(info.value)
    assert "broker cannot load its metadata" in log and "127.0.0.1:1" in log
    assert "Traceback" not in log


# ===================================================================== in-process
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
