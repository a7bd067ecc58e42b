"""A retried send keeps its unique id: two broker groups, one's store frozen mid-send.

broker-b's store process is stopped with SIGSTOP: broker-b takes sends and
hands them to its store, which answers nothing, so the producer's sends that
reach broker-b time out and are retried on broker-a. Then the store is resumed
with SIGCONT and appends what it was handed while frozen: the lost-answer
case, where one send leaves two copies. Every result names the id given before
the first attempt, and both copies of such a send, found by that id on the two
groups, carry it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import BoltMQError, Message, Producer, ProducerOptions
from boltmq.cli.dev.local_cluster import LocalCluster
from tests.integration.two_groups import create_topic, start_two_groups
from tests.waiting import wait_until

TOPIC = "Retried"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # the frozen broker stays routed
    started = start_two_groups(tmp_path, ("broker_expiry_ms=120000",))
    try:
        create_topic(started, TOPIC, 2)
        yield started
    finally:
        started.stop()


def test_a_send_retried_after_a_timeout_keeps_its_unique_id(cluster: LocalCluster) -> None:
    assert cluster.registry is not None
    store = cluster.groups["broker-b"][0].store
    assert store is not None and store.proc is not None
    options = ProducerOptions(
        send_timeout_ms=1_500, retry_times=2, fault_avoidance_ms=0, natural_batching=False
    )
    with Producer(cluster.registry.address, "retry-pg", options=options) as p:
        # Connected to both groups first: a request to a frozen broker then waits
        # on an open connection and times out (with none it fails at once, unsent).
        warm = {p.send(Message(topic=TOPIC, body=b"warm")).queue.broker_name for _ in range(4)}
        assert warm == {"broker-a", "broker-b"}
        os.kill(store.proc.pid, signal.SIGSTOP)
        try:
            results = [p.send(Message(topic=TOPIC, body=b"r%d" % i)) for i in range(6)]
        finally:
            os.kill(store.proc.pid, signal.SIGCONT)
        # Round-robin over both groups' queues: half the sends went to broker-b first,
        # timed out, and were retried on broker-a, which stored every one.
        assert {r.queue.broker_name for r in results} == {"broker-a"}
        copies = {r.unique_id: [] for r in results}

        def twice_stored() -> bool:  # broker-b's store appends what it was handed
            try:
                copies.update({r.unique_id: p.find_message(TOPIC, r.unique_id) for r in results})
            except BoltMQError:
                return False  # broker-b is still catching up
            return any(len(found) == 2 for found in copies.values())

        wait_until(twice_stored, "a send stored by both groups")
    for i, result in enumerate(results):
        found = copies[result.unique_id]
        assert {c.properties["UNIQ_KEY"] for c in found} == {result.unique_id}
        assert {c.body for c in found} == {b"r%d" % i}
        assert result.msg_id in {c.msg_id for c in found}  # broker-a's copy
        assert len({c.msg_id for c in found}) == len(found) <= 2  # and broker-b's
