"""A group's committed offsets survive restarts of the broker and the store."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from boltmq import BoltMQError, Message, Producer, PushConsumer
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import DEADLINE_S, Collector, bodies, group_lag, send_all
from tests.integration.sdk_fixtures import consumers as consumers
from tests.integration.sdk_fixtures import producer as producer
from tests.waiting import wait_until

POLL_S = 0.05


def consume_and_commit(
    cluster: Cluster,
    consumers: Callable[..., PushConsumer],
    group: str,
    topic: str,
    expected: set[bytes],
) -> PushConsumer:
    collector = Collector()
    consumer = consumers(group, {topic: "*"}, collector)
    collector.wait_for(expected)
    wait_until(lambda: group_lag(cluster, group, topic) == 0, "every offset to be committed")
    return consumer


RESTARTS: dict[str, Callable[[Cluster], object]] = {
    "broker": lambda c: c.restart_broker(),
    "store": lambda c: c.restart_store(),
    "store-then-broker": lambda c: (c.restart_store(), c.restart_broker()),
    "killed-broker": lambda c: c.restart_broker(kill=True),
    "killed-store": lambda c: c.restart_store(kill=True),
}
"""Graceful restarts must lose nothing; a killed broker may lose the offsets it
had not yet persisted (``offset_persist_interval_ms``), never messages."""


@pytest.mark.parametrize("restart", sorted(RESTARTS))
def test_committed_offsets_survive_a_restart(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer], restart: str
) -> None:
    first = bodies("first", 40)
    first_sent = send_all(producer, "durable", first)
    consume_and_commit(cluster, consumers, "cg-durable", "durable", set(first)).shutdown()
    RESTARTS[restart](cluster)
    second = bodies("second", 40)
    for body in second:
        send_when_back(producer, "durable", body)

    collector = Collector()
    consumers("cg-durable", {"durable": "*"}, collector)
    collector.wait_for(set(second), "the restarted consumer to resume")
    wait_until(lambda: group_lag(cluster, "cg-durable", "durable") == 0, "the lag to reach 0")
    assert set(collector.bodies()) - set(first) == set(second)  # nothing lost, nothing unknown
    again = [g for g in collector.got if g.body in set(first)]
    if restart != "killed-broker":
        # Every message of the first round was committed before the restart.
        assert not again, f"{len(again)} committed messages delivered again"
    # Whatever comes again is, per queue, a tail of the first round: the consumer
    # resumed from an offset the group had committed, never from a gap.
    last = {}
    for result in first_sent:
        last[result.queue.queue_id] = max(last.get(result.queue.queue_id, -1), result.queue_offset)
    for queue_id in {g.queue_id for g in again}:
        offsets = sorted({g.queue_offset for g in again if g.queue_id == queue_id})
        assert offsets == list(range(offsets[0], last[queue_id] + 1)), (queue_id, offsets)


def send_when_back(producer: Producer, topic: str, body: bytes) -> None:
    """Send ``body``, retrying while the restarted service comes back."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            producer.send(Message(topic=topic, body=body))
            return
        except BoltMQError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"sends still fail after the restart: {exc}") from None
            time.sleep(POLL_S)
