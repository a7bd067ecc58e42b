"""A custom queue selector (RocketMQ's MessageQueueSelector) on two broker groups: the
application chooses each send's queue from the topic's writable queues, the send stays
there, and a selector that fails or answers a queue it was not given is refused."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from boltmq import Message, MessageQueue, Producer, PullConsumer, SendError, SendStatus
from boltmq.cli.dev.local_cluster import LocalCluster
from tests.integration.two_groups import create_topic, registry_of
from tests.integration.two_groups import two_groups as two_groups

TOPIC = "Selected"


@pytest.fixture(scope="module")
def producer(two_groups: LocalCluster) -> Iterator[Producer]:
    create_topic(two_groups, TOPIC)
    with Producer(registry_of(two_groups), "pg-selector") as made:
        yield made


def by_order(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """RocketMQ's classic example: the order id modulo the number of queues."""
    return queues[int(arg) % len(queues)]


def test_the_selector_chooses_every_send_s_queue_on_both_groups(
    two_groups: LocalCluster, producer: Producer
) -> None:
    given: list[tuple[list[MessageQueue], bytes]] = []

    def recording(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        given.append((list(queues), bytes(msg.body)))
        return by_order(queues, msg, arg)

    sent = {}
    for step in range(3):
        for order in range(4):
            body = f"order-{order}-step-{step}".encode()
            result = producer.send(Message(topic=TOPIC, body=body), selector=recording, arg=order)
            assert result.status is SendStatus.SEND_OK
            sent[body] = result.queue
    queues = given[0][0]
    assert queues == sorted(queues) and len(queues) == 4  # two queues on each group
    assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
    assert [body for _, body in given] == list(sent)  # the message itself is passed
    for body, queue in sent.items():
        assert queue == queues[int(body.split(b"-")[1]) % 4]
    # each order's steps are in its queue, in order
    with PullConsumer(registry_of(two_groups), "cg-selector") as puller:
        for order in range(4):
            result = puller.pull(queues[order], 0)
            steps = [bytes(m.body) for m in result.messages]
            assert steps == [f"order-{order}-step-{s}".encode() for s in range(3)]
    batch = producer.send_batch(
        [Message(topic=TOPIC, body=b"b1"), Message(topic=TOPIC, body=b"b2")],
        selector=by_order,
        arg=3,
    )
    assert {r.queue for r in batch} == {queues[3]}


def test_bad_selectors_are_refused(producer: Producer) -> None:
    message = Message(topic=TOPIC, body=b"x")
    elsewhere = MessageQueue(TOPIC, "broker-z", 0)
    with pytest.raises(SendError, match="returned .*broker-z.*not one of the 4 writable queues"):
        producer.send(message, selector=lambda queues, msg, arg: elsewhere)
    with pytest.raises(SendError, match="not one of"):
        producer.send(message, selector=lambda queues, msg, arg: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(SendError, match="queue selector failed: ZeroDivisionError"):
        producer.send(message, selector=lambda queues, msg, arg: queues[1 // 0])
    with pytest.raises(ValueError, match="not both"):
        producer.send(message, "key", selector=by_order, arg=1)
    with pytest.raises(ValueError, match="selector must be callable"):
        producer.send(message, selector="queue-0")  # type: ignore[arg-type]
