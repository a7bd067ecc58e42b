"""Long polling: pulls of empty queues park at the broker until a message arrives.

A parked PullMessage or PullQueues is woken by a send to any queue it waits on, long before
its suspend runs out; an unwoken pull answers with the empty status when it times out; a
broker that stops answers its parked pulls instead of cancelling them.
"""

from __future__ import annotations

import time

from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.record import decode_records
from tests.integration.broker_fixtures import (
    EMPTY,
    LONG_SUSPEND_MS,
    RPC_TIMEOUT_S,
    Cluster,
    msg,
    pull,
    queue_pull,
    send,
    upsert,
)
from tests.integration.broker_fixtures import cluster as cluster
from tests.integration.broker_fixtures import stubs as stubs


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
