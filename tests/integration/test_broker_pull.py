"""PullMessage and PullQueues forwarding the store's answers: what a consumer reads.

A raw pull answer is the store's encoding, records last, byte for byte; PullQueues answers
each queue as the store does and commits the offsets it carries; queues pulled again after a
parked pull timed out answer as the store would, and the next message sent shows up.
"""

from __future__ import annotations

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.record import decode_records
from tests.integration.broker_fixtures import (
    EMPTY,
    RPC_TIMEOUT_S,
    Cluster,
    msg,
    queue_pull,
    send,
    upsert,
)
from tests.integration.broker_fixtures import cluster as cluster
from tests.integration.broker_fixtures import stubs as stubs


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
    # Pulled at once: the store's report of the arrival may not have reached the broker
    # yet, but the broker made the append itself and no longer trusts what it kept.
    answer = stub.PullQueues(request, timeout=RPC_TIMEOUT_S)
    assert [bytes(r.body) for r in decode_records(answer.answers[0].records)] == [b"third"]
