"""Natural batching of concurrent synchronous sends, against a real registry, store and broker.

64 threads each send 20 messages with ``Producer.send`` and wait for each result
(half of them with a sharding key of their own). Every message must be stored
exactly once, each thread's results must name what is stored (msg id, queue,
offset, read back by pulling), a sharded thread's messages must sit in its queue
in the order it sent them, and the broker must have seen fewer SendMessage calls
than messages (``boltmq_broker_in_requests_total`` on its metrics endpoint). With
``natural_batching=False`` every send is its own call again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, ProducerOptions, PullConsumer, PullStatus, SendResult
from boltmq.message import ReceivedMessage
from tests.integration.conftest import Cluster
from tests.integration.test_metrics import free_port, scrape, value

THREADS = 64
EACH = 20
TOPIC = "Batched"
REQUESTS = "boltmq_broker_in_requests_total"


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[Cluster, int]]:
    """A cluster whose broker serves its metrics; and that port."""
    port = free_port()
    cluster = Cluster(tmp_path, broker_settings=(f"metrics_port={port}",))
    yield cluster, port
    cluster.stop()


def send_concurrently(
    producer: Producer, threads: int, each: int, prefix: str
) -> dict[int, list[tuple[bytes, SendResult]]]:
    """``threads`` threads released at once, each sending ``each`` messages one by one;
    the even threads with a sharding key of their own. Each thread's (body, result)."""
    start = threading.Barrier(threads)
    sent: dict[int, list[tuple[bytes, SendResult]]] = {}
    errors: list[BaseException] = []

    def run(thread: int) -> None:
        key = f"{prefix}-key-{thread}" if thread % 2 == 0 else None
        mine: list[tuple[bytes, SendResult]] = []
        start.wait()
        try:
            for index in range(each):
                body = f"{prefix}-{thread}-{index}".encode()
                mine.append((body, producer.send(Message(TOPIC, body), sharding_key=key)))
        except BaseException as exc:
            errors.append(exc)
        sent[thread] = mine

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[:3]
    return sent


def stored(registry: str) -> list[ReceivedMessage]:
    """Every message of the topic, queue by queue."""
    out: list[ReceivedMessage] = []
    with PullConsumer(registry, "batch-probe") as puller:
        for queue in puller.queues(TOPIC):
            offset = 0
            while True:
                result = puller.pull(queue, offset, max_messages=256)
                if result.status is not PullStatus.FOUND:
                    break
                out += result.messages
                offset = result.next_begin_offset
    return out


def test_concurrent_sends_leave_in_fewer_calls_each_with_its_own_result(
    metered: tuple[Cluster, int],
) -> None:
    cluster, port = metered
    registry = cluster.registry.address
    with Producer(registry, "batch-pg") as producer:
        producer.send(Message(TOPIC, b"creates the topic"))
        before = value(scrape(port), REQUESTS, topic=TOPIC)
        sent = send_concurrently(producer, THREADS, EACH, "on")
        calls = value(scrape(port), REQUESTS, topic=TOPIC) - before

    messages = THREADS * EACH
    assert calls < messages, f"{calls} SendMessage calls for {messages} messages"
    by_body: dict[bytes, list[ReceivedMessage]] = {}
    for message in stored(registry):
        by_body.setdefault(bytes(message.body), []).append(message)
    results = [pair for thread in sent.values() for pair in thread]
    assert len(results) == messages
    assert len(by_body) == messages + 1  # and the one that created the topic
    for body, result in results:
        copies = by_body[body]
        assert len(copies) == 1, f"{body!r} stored {len(copies)} times"
        (copy,) = copies
        assert (copy.msg_id, copy.queue_id, copy.queue_offset) == (
            result.msg_id,
            result.queue.queue_id,
            result.queue_offset,
        )
    for thread in range(0, THREADS, 2):  # the sharded ones: one queue, in send order
        pairs = sent[thread]
        assert len({r.queue for _, r in pairs}) == 1
        offsets = [r.queue_offset for _, r in pairs]
        assert offsets == sorted(offsets) and len(set(offsets)) == EACH


def test_with_natural_batching_off_every_send_is_its_own_call(
    metered: tuple[Cluster, int],
) -> None:
    cluster, port = metered
    options = ProducerOptions(natural_batching=False)
    with Producer(cluster.registry.address, "unbatched-pg", options=options) as producer:
        producer.send(Message(TOPIC, b"creates the topic"))
        before = value(scrape(port), REQUESTS, topic=TOPIC)
        sent = send_concurrently(producer, 8, 5, "off")
        calls = value(scrape(port), REQUESTS, topic=TOPIC) - before
    assert calls == 8 * 5
    assert all(len(pairs) == 5 for pairs in sent.values())
