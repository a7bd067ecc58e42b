"""PullConsumer end to end: queues of a topic, pull, commit, long polls, pull_queues."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from boltmq import (
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullError,
    PullStatus,
    SendStatus,
    TopicNotFound,
)
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import DEADLINE_S, QUEUES, bodies
from tests.integration.sdk_fixtures import producer as producer


def test_a_send_auto_creates_a_new_topic(cluster: Cluster, producer: Producer) -> None:
    with PullConsumer(cluster.registry.address, "cg-new") as puller:
        with pytest.raises(TopicNotFound):
            puller.queues("brand-new")
        result = producer.send(Message(topic="brand-new", body=b"first"))
        assert result.status is SendStatus.SEND_OK and result.queue.topic == "brand-new"
        # The broker registers a topic it creates before the send returns.
        queues = puller.queues("brand-new")
        assert [q.queue_id for q in queues] == list(range(QUEUES))
        pulled = puller.pull(result.queue, 0)
        assert [bytes(m.body) for m in pulled.messages] == [b"first"]


def test_pull_consumer_pulls_commits_and_long_polls(cluster: Cluster, producer: Producer) -> None:
    results = producer.send_batch([Message(topic="pulled", body=b) for b in bodies("p", 10)])
    queue = results[0].queue
    with PullConsumer(cluster.registry.address, "cg-pull") as puller:
        assert queue in puller.queues("pulled")
        assert puller.committed(queue) == -1
        head = puller.pull(queue, 0, max_messages=4)
        assert head.status is PullStatus.FOUND
        assert [bytes(m.body) for m in head.messages] == bodies("p", 4)
        assert head.next_begin_offset == 4 and head.max_offset == 10
        puller.commit(queue, head.next_begin_offset)
        assert puller.committed(queue) == 4
        rest = puller.pull(queue, puller.committed(queue), max_messages=32)
        assert [bytes(m.body) for m in rest.messages] == bodies("p", 10)[4:]
        puller.commit(queue, rest.next_begin_offset)
        assert puller.committed(queue) == 10
        assert puller.pull(queue, 10).status is PullStatus.NO_NEW_MSG
        assert puller.pull(queue, 0, subscription="nothing-has-this-tag").status in (
            PullStatus.NO_MATCHED_MSG,
            PullStatus.NO_NEW_MSG,
        )

        # A long poll parked on the empty tail is answered by the next send to that
        # queue; its wait (20 s) is far longer than this test's deadline.
        parked: list[Any] = []
        poller = threading.Thread(
            target=lambda: parked.append(puller.pull(queue, 10, wait_ms=20_000)), daemon=True
        )
        poller.start()
        time.sleep(0.3)  # let the pull park; it must still be waiting
        assert not parked
        _send_to(producer, queue, b"wake-up")
        poller.join(DEADLINE_S)
        assert parked and parked[0].status is PullStatus.FOUND
        assert [bytes(m.body) for m in parked[0].messages] == [b"wake-up"]


def test_pull_queues_reads_many_queues_in_one_call_and_long_polls_on_all(
    cluster: Cluster, producer: Producer
) -> None:
    first = producer.send_batch([Message(topic="many-a", body=b) for b in bodies("a", 5)])
    second = producer.send_batch(
        [Message(topic="many-b", body=b, tags="blue") for b in bodies("b", 3)]
    )
    with PullConsumer(cluster.registry.address, "cg-many") as puller:
        queues = puller.queues("many-a") + puller.queues("many-b")
        offsets = dict.fromkeys(queues, 0)
        offsets[first[0].queue] = 2
        results = puller.pull_queues(
            offsets, max_messages=2, subscriptions={"many-b": "blue || red"}
        )
        assert set(results) == set(queues)  # every queue answered: far below the budget
        assert [bytes(m.body) for m in results[first[0].queue].messages] == bodies("a", 5)[2:4]
        assert results[first[0].queue].next_begin_offset == 4
        assert [bytes(m.body) for m in results[second[0].queue].messages] == bodies("b", 3)[:2]
        assert {
            r.status for q, r in results.items() if q not in (first[0].queue, second[0].queue)
        } == {PullStatus.NO_NEW_MSG}
        # A byte budget of one: the first queue alone answers, with one message.
        cut = puller.pull_queues({second[0].queue: 2, first[0].queue: 4}, max_bytes=1)
        assert list(cut) == [second[0].queue]
        assert [bytes(m.body) for m in cut[second[0].queue].messages] == bodies("b", 3)[2:]

        # Parked on every queue's end, the call is answered by a send to any of them.
        ends = {q: r.max_offset for q, r in puller.pull_queues(offsets).items()}
        parked: list[Any] = []
        poller = threading.Thread(
            target=lambda: parked.append(puller.pull_queues(ends, wait_ms=20_000)), daemon=True
        )
        poller.start()
        time.sleep(0.3)  # let the call park; it must still be waiting
        assert not parked
        woken = producer.send(Message(topic="many-b", body=b"wake-up")).queue
        poller.join(DEADLINE_S)
        assert parked, "the parked call was not woken by the send"
        assert [bytes(m.body) for m in parked[0][woken].messages] == [b"wake-up"]

        with pytest.raises(ValueError, match="at least one queue"):
            puller.pull_queues({})
        with pytest.raises(ValueError, match="offsets >= 0"):
            puller.pull_queues({queues[0]: -1})
        with pytest.raises(PullError, match=r"pulls\[0\].subscription"):
            puller.pull_queues({queues[0]: 0}, subscriptions={"many-a": "A ||"})


def _send_to(producer: Producer, queue: MessageQueue, body: bytes) -> None:
    """Send ``body`` until it lands on ``queue`` (round-robin reaches it within QUEUES)."""
    for _ in range(QUEUES):
        if producer.send(Message(topic=queue.topic, body=body)).queue == queue:
            return
    raise AssertionError(f"round-robin never reached {queue}")


def test_pull_queues_of_several_calls_stops_waiting_at_the_first_answer_with_messages(
    cluster: Cluster, producer: Producer
) -> None:
    # 1,200 queues of one broker take two calls (at most 1,024 queues a call): 600 each.
    # A message in the first call's queues ends the wait: the second call, parked on its
    # empty queues, is withdrawn, and its queues are absent from the result.
    with sync_channel(cluster.broker.address) as chan:
        admin = broker_pb2_grpc.BrokerServiceStub(chan)
        for topic in ("wide-a", "wide-b"):
            admin.UpsertTopic(
                broker_pb2.UpsertTopicRequest(
                    topic=registry_pb2.TopicConfig(
                        name=topic, read_queue_nums=600, write_queue_nums=600, perm=6
                    )
                ),
                timeout=10,
            )
    sent = producer.send(Message(topic="wide-a", body=b"first"))
    with PullConsumer(cluster.registry.address, "cg-wide") as puller:
        first, second = puller.queues("wide-a"), puller.queues("wide-b")
        assert len(first) == len(second) == 600
        results = puller.pull_queues(dict.fromkeys(first + second, 0), wait_ms=60_000)
        assert set(results) == set(first)
        assert [bytes(m.body) for m in results[sent.queue].messages] == [b"first"]
        assert {r.status for q, r in results.items() if q != sent.queue} == {PullStatus.NO_NEW_MSG}
