"""Orderly consumption end to end: per-key order, one consume thread, retry in place,
queue locks handed over.

A sharding key keeps each key on one queue; an orderly PushConsumer delivers a
queue's messages one at a time, in order, and retries a failed message in place
(concurrent consumers send it back to the broker's retry topic instead:
tests/integration/test_retry_delay.py). A member joining while messages stream in
gets half the queues once the first member has committed and unlocked them: no key
is delivered out of order, twice, or by two members at once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from boltmq import ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import QUEUES, Collector, bodies, group_lag, send_all
from tests.integration.sdk_fixtures import consumers as consumers
from tests.integration.sdk_fixtures import producer as producer
from tests.waiting import wait_until


# ===================================================================== ordering
def test_sharding_key_keeps_each_key_in_order_for_an_orderly_consumer(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    keys = [f"order-{k}" for k in range(6)]
    queue_of: dict[str, set[int]] = {k: set() for k in keys}
    for step in range(20):  # interleaved: key 0 step 0, key 1 step 0, ...
        for key in keys:
            result = producer.send(
                Message(topic="ordered", body=f"{key}:{step}".encode()), sharding_key=key
            )
            queue_of[key].add(result.queue.queue_id)
    assert all(len(queues) == 1 for queues in queue_of.values()), queue_of

    seen_batches: list[int] = []

    def listener(messages: list[ReceivedMessage]) -> None:
        seen_batches.append(len(messages))
        collector(messages)

    collector = Collector()
    consumer = consumers("cg-ordered", {"ordered": "*"}, listener, orderly=True)
    collector.wait_for({f"{k}:{s}".encode() for k in keys for s in range(20)})
    assert set(seen_batches) == {1}  # orderly: one message per call
    assert len(consumer.assigned) == QUEUES
    steps: dict[str, list[int]] = {k: [] for k in keys}
    for body in collector.bodies():
        key, step = body.decode().split(":")
        steps[key].append(int(step))
    for key in keys:
        assert steps[key] == list(range(20)), (key, steps[key])


def test_one_thread_serves_many_queues_and_a_failing_queue_holds_back_only_itself(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    # Orderly: a failed message is retried in place. With one consume thread every queue
    # of both topics is pulled and delivered by that thread.
    stuck_until = threading.Event()

    def outcome(messages: list[ReceivedMessage]) -> ConsumeResult:
        if messages[0].topic == "stuck" and not stuck_until.is_set():
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    stuck = send_all(producer, "stuck", bodies("s", 3))
    flowing = send_all(producer, "flowing", bodies("f", 12))
    collector = Collector(outcome)
    consumer = consumers(
        "cg-one-thread", {"stuck": "*", "flowing": "*"}, collector, orderly=True, consume_threads=1
    )
    assert len({r.queue for r in flowing}) > 1
    collector.wait_for(set(bodies("f", 12)), "the other queues of the thread")
    assert len(consumer.assigned) == 2 * QUEUES
    stuck_offered = [b for b in collector.bodies() if b.startswith(b"s")]
    assert stuck_offered and set(stuck_offered) <= set(bodies("s", 3))
    stuck_until.set()
    collector.wait_for(set(bodies("s", 3)), "the failing queue, once its listener succeeds")
    for queue_id in {r.queue.queue_id for r in stuck}:  # each queue in order, nothing lost
        offered = [
            g.body for g in collector.got if g.body.startswith(b"s") and g.queue_id == queue_id
        ]
        firsts = list(dict.fromkeys(offered))
        assert firsts == [
            b for b, r in zip(bodies("s", 3), stuck, strict=True) if r.queue.queue_id == queue_id
        ]


# ===================================================================== redelivery
@pytest.mark.parametrize("failure", ["RECONSUME_LATER", "raise"])
def test_a_failed_listener_gets_the_same_messages_again(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer], failure: str
) -> None:
    sent = producer.send_batch([Message(topic="retry", body=b) for b in bodies("r", 5)])
    attempts: Counter[str] = Counter()

    def outcome(messages: list[ReceivedMessage]) -> ConsumeResult:
        for m in messages:
            attempts[m.msg_id] += 1
        if min(attempts[m.msg_id] for m in messages) < 3:
            if failure == "raise":
                raise RuntimeError("listener failed on purpose")
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    collector = Collector(outcome)
    # Orderly consumers retry in place (concurrent ones send failed messages back to
    # the broker's retry topic: tests/integration/test_retry_delay.py).
    consumers("cg-retry", {"retry": "*"}, collector, orderly=True)
    wanted = {r.msg_id for r in sent}
    wait_until(
        lambda: group_lag(cluster, "cg-retry", "retry") == 0,
        "the messages to be consumed after two failures",
    )
    assert {m: attempts[m] for m in wanted} == {m: 3 for m in wanted}
    delivered = Counter(g.msg_id for g in collector.got)
    assert {m: delivered[m] for m in wanted} == {m: 3 for m in wanted}


# ================================================================ lock handover
class KeyWatch:
    """A listener for several members at once: records which member got each step of each
    sharding key, and every time two calls held one key at once (which a queue lock
    forbids: a key stays on one queue)."""

    def __init__(self) -> None:
        self.steps: dict[str, list[tuple[str, int]]] = {}
        self.overlaps: list[str] = []
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def member(self, name: str) -> Callable[[list[ReceivedMessage]], None]:
        def listener(messages: list[ReceivedMessage]) -> None:
            for m in messages:
                key, step = bytes(m.body).decode().split(":")
                with self._lock:
                    if key in self._busy:
                        self.overlaps.append(key)
                    self._busy.add(key)
                    self.steps.setdefault(key, []).append((name, int(step)))
                time.sleep(0.002)  # widen the window another member could step into
                with self._lock:
                    self._busy.discard(key)

        return listener

    def count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self.steps.values())


def test_the_queue_lock_moves_to_a_member_joining_mid_stream_without_reordering_a_key(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    keys, steps = [f"k{n}" for n in range(8)], 40
    watch = KeyWatch()

    def send(step: int) -> None:
        for key in keys:
            body = f"{key}:{step}".encode()
            producer.send(Message(topic="handover", body=body), sharding_key=key)

    send(0)  # the topic exists before the consumer starts
    first = consumers("cg-handover", {"handover": "*"}, watch.member("first"), orderly=True)
    sending = threading.Thread(target=lambda: [send(step) for step in range(1, steps)])
    sending.start()  # the load: sends go on while the second member joins
    try:
        wait_until(lambda: watch.count() >= len(keys) * steps // 4, "a quarter consumed")
        second = consumers("cg-handover", {"handover": "*"}, watch.member("second"), orderly=True)
        wait_until(
            lambda: len(first.assigned) == len(second.assigned) == QUEUES // 2,
            "the first member to hand two locked queues over",
        )
    finally:
        sending.join()
    wait_until(lambda: watch.count() >= len(keys) * steps, "every message")
    time.sleep(0.5)  # a duplicate would show by now
    assert watch.overlaps == []
    moved = 0
    for key in keys:
        got = watch.steps[key]
        assert [s for _, s in got] == list(range(steps)), (key, got)  # in order, once each
        members = [name for name, _ in got]
        if len(set(members)) == 2:  # handed over once: the first member's steps, then none
            moved += 1
            assert members == sorted(members), (key, members)  # "first" < "second"
    assert moved > 0  # some key's queue changed hands mid-stream
