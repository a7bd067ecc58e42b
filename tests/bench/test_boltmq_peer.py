"""The comparison's BoltMQ consumer of several topics reads every message exactly once;
the concurrent-sends run counts what its threads, sharing one producer, had acked."""

from __future__ import annotations

import time
from pathlib import Path

from bench.compare.boltmq_peer import BoltMQPeer
from bench.compare.workload import Workload, produce_concurrently

DEADLINE_S = 60.0
WARM_UP_PER_TOPIC = 5
"""create_topics sends one message to auto-create a topic, then one to each of its 4 queues."""


def test_the_consumer_of_several_topics_reads_every_message_once_and_can_start_at_the_ends(
    tmp_path: Path,
) -> None:
    peer = BoltMQPeer()
    peer.start(tmp_path)
    try:
        topics = peer.create_topics("peer", 3)
        producer = peer.producer(topics)
        for n, topic in enumerate(topics):
            assert producer.send_batch(topic, [f"{topic}-{i}".encode() for i in range(40 + n)])
        producer.close()
        consumer = peer.consumer(topics, from_start=True)
        bodies: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        expected = sum(40 + n + WARM_UP_PER_TOPIC for n in range(3))
        while len(bodies) < expected and time.monotonic() < deadline:
            bodies += consumer.poll()
        assert consumer.poll() == []  # nothing more, after a long poll on every queue
        consumer.close()
        assert len(bodies) == expected
        for n, topic in enumerate(topics):
            assert sorted(b for b in bodies if b.startswith(f"{topic}-".encode())) == sorted(
                f"{topic}-{i}".encode() for i in range(40 + n)
            )
        late = peer.consumer(topics, from_start=False)
        assert late.poll() == []
        late.close()
    finally:
        peer.stop()


def test_the_concurrent_senders_share_one_producer_and_count_what_was_acked(
    tmp_path: Path,
) -> None:
    peer = BoltMQPeer()
    peer.start(tmp_path)
    try:
        topics = peer.create_topics("many", 2)
        row = produce_concurrently(peer, Workload(seconds=0.5, senders=8), topics)
    finally:
        peer.stop()
    assert (row.scenario, row.mode, row.producers, row.topics) == (
        "produce",
        "concurrent-sends",
        8,
        2,
    )
    assert row.messages > 0 and row.p50_ms is not None and row.p99_ms is not None
