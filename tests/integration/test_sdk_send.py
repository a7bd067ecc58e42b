"""The SDK's sends end to end: send, send_batch, send_records, send_async and send_oneway.

Each test sends through :class:`boltmq.Producer` to a real registry, store and
broker, and reads back what a consumer of the topic sees.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from boltmq import Message, Producer, PullConsumer, PullStatus, PushConsumer, SendResult, SendStatus
from boltmq.message import batch_records
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import (
    DEADLINE_S,
    QUEUES,
    Collector,
    bodies,
    group_lag,
    pull_everything,
)
from tests.integration.sdk_fixtures import consumers as consumers
from tests.integration.sdk_fixtures import producer as producer
from tests.waiting import wait_until


def test_round_trip_with_tags_and_keys_filters_by_subscription(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    sent: dict[bytes, SendResult] = {}
    for i in range(30):
        tag = "ABC"[i % 3]
        body = f"{tag}-{i}".encode()
        sent[body] = producer.send(
            Message(
                topic="orders",
                body=body,
                tags=tag,
                keys=[f"order-{i}", f"user-{i % 5}"],
                properties={"n": str(i)},
            )
        )
    wanted = {b for b in sent if not b.startswith(b"C")}
    collector = Collector()
    consumers("cg-tags", {"orders": "A || B"}, collector)
    collector.wait_for(wanted)
    # The consumer has committed past every queue's end, so the C messages were
    # filtered out by the subscription, not merely not reached yet.
    wait_until(lambda: group_lag(cluster, "cg-tags", "orders") == 0, "the group's lag to be 0")
    got = {g.body: g for g in collector.got}
    assert set(got) == wanted
    for body in wanted:
        i = int(body.split(b"-")[1])
        seen, result = got[body], sent[body]
        assert seen.tags == body[:1].decode()
        assert seen.keys == (f"order-{i}", f"user-{i % 5}")
        assert seen.properties["n"] == str(i)
        assert (seen.msg_id, seen.queue_id, seen.queue_offset) == (
            result.msg_id,
            result.queue.queue_id,
            result.queue_offset,
        )
    assert len({r.queue.queue_id for r in sent.values()}) == QUEUES  # round-robin spread


def test_send_batch_lands_in_one_queue_in_order(cluster: Cluster, producer: Producer) -> None:
    msgs = [Message(topic="batched", body=b, tags="T") for b in bodies("batch", 20)]
    results = producer.send_batch(msgs)
    assert len(results) == 20 and {r.status for r in results} == {SendStatus.SEND_OK}
    assert len({r.queue for r in results}) == 1
    first = results[0].queue_offset
    assert [r.queue_offset for r in results] == list(range(first, first + 20))
    assert len({r.msg_id for r in results}) == 20
    with PullConsumer(cluster.registry.address, "cg-batch") as puller:
        pulled = puller.pull(results[0].queue, first, max_messages=32)
    assert pulled.status is PullStatus.FOUND
    assert [bytes(m.body) for m in pulled.messages] == bodies("batch", 20)
    assert [m.msg_id for m in pulled.messages] == [r.msg_id for r in results]


def test_send_records_sends_what_batch_records_encoded(
    cluster: Cluster, producer: Producer
) -> None:
    msgs = [
        Message(topic="batched", body=b, keys=[f"r{i}"])
        for i, b in enumerate(bodies("records", 20))
    ]
    results = producer.send_records("batched", batch_records(msgs), len(msgs))
    assert {r.status for r in results} == {SendStatus.SEND_OK} and len(results) == 20
    with PullConsumer(cluster.registry.address, "cg-records") as puller:
        pulled = puller.pull(results[0].queue, results[0].queue_offset, max_messages=32)
    assert [bytes(m.body) for m in pulled.messages] == bodies("records", 20)
    assert [list(m.keys) for m in pulled.messages] == [[f"r{i}"] for i in range(20)]
    with pytest.raises(ValueError, match="at least one record"):
        producer.send_records("batched", b"", 0)
    # A count that does not match the bytes: refused whole, nothing stored.
    refused = producer.send_records("batched", batch_records(msgs[:2]), 3)
    assert {r.status for r in refused} == {SendStatus.SEND_FAILED}
    assert "before record 2 of 3" in refused[0].error


def test_send_async_callbacks_and_oneway_all_arrive(cluster: Cluster, producer: Producer) -> None:
    outcomes: list[tuple[SendResult | None, BaseException | None]] = []
    lock = threading.Lock()

    def callback(result: SendResult | None, error: BaseException | None) -> None:
        with lock:
            outcomes.append((result, error))

    async_bodies, oneway_bodies = bodies("async", 300), bodies("oneway", 100)
    futures = [producer.send_async(Message(topic="fast", body=b), callback) for b in async_bodies]
    for body in oneway_bodies:
        assert producer.send_oneway(Message(topic="fast", body=body)) is None
    producer.flush()
    wait_until(lambda: len(outcomes) == len(async_bodies), "every callback")
    assert all(error is None for _, error in outcomes)
    assert {r.status for r, _ in outcomes if r} == {SendStatus.SEND_OK}
    results = [f.result(timeout=DEADLINE_S) for f in futures]
    assert len({r.msg_id for r in results}) == len(async_bodies)
    assert {r.msg_id for r, _ in outcomes if r} == {r.msg_id for r in results}

    expected = async_bodies + oneway_bodies
    wait_until(
        lambda: len(pull_everything(cluster, "fast")) >= len(expected),
        "every async and oneway message to be stored",
    )
    stored = [bytes(m.body) for m in pull_everything(cluster, "fast")]
    assert sorted(stored) == sorted(expected)  # each exactly once
