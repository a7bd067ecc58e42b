"""The Python SDK end to end against a real registry, store and broker.

Every test talks to the ``cluster`` fixture's processes through
:class:`boltmq.Producer`, :class:`boltmq.PushConsumer` and
:class:`boltmq.PullConsumer` only; what is asserted is what an application
sees: which messages its listener got, in which order, on which queues, and
what the group's committed offsets say. Waiting is a poll with a deadline; a
deadline that passes is a failure with the state that was still missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from boltmq import (
    BoltMQError,
    ConsumeResult,
    Message,
    MessageError,
    MessageQueue,
    Producer,
    PullConsumer,
    PullError,
    PullStatus,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    RegistryUnavailable,
    SendResult,
    SendStatus,
    TopicNotFound,
)
from boltmq.kernel.channels import sync_channel
from boltmq.message import batch_records
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2
from tests.integration.conftest import Cluster
from tests.integration.procs import REPO_ROOT
from tests.waiting import wait_until

DEADLINE_S = 30.0
"""Generous bound for anything asynchronous to show; tests pass as soon as it does."""
POLL_S = 0.05
FAST = dict(
    rebalance_interval_ms=300, long_poll_ms=2_000, commit_interval_ms=200, suspend_on_failure_ms=100
)
"""Consumer intervals for tests: rebalance and commit within a fraction of a second."""
QUEUES = 4
"""Queues of an auto-created topic (the producer's default_topic_queue_nums)."""


@dataclass(frozen=True)
class Got:
    """What a listener saw of one message (copied out of the pull buffer)."""

    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    msg_id: str
    queue_id: int
    queue_offset: int
    properties: dict[str, str]


class Collector:
    """A listener that records every message it is given, thread-safely."""

    def __init__(self, outcome: Callable[[list[ReceivedMessage]], Any] | None = None) -> None:
        self.got: list[Got] = []
        self.calls: list[int] = []
        self.outcome = outcome
        self._lock = threading.Lock()

    def __call__(self, messages: list[ReceivedMessage]) -> Any:
        with self._lock:
            self.calls.append(len(messages))
            self.got += [
                Got(
                    bytes(m.body),
                    m.tags,
                    tuple(m.keys),
                    m.msg_id,
                    m.queue_id,
                    m.queue_offset,
                    dict(m.properties),
                )
                for m in messages
            ]
        return self.outcome(messages) if self.outcome else ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [g.body for g in self.got]

    def wait_for(self, expected: set[bytes], what: str = "messages") -> None:
        wait_until(
            lambda: expected <= set(self.bodies()),
            f"{what}: missing {sorted(expected - set(self.bodies()))[:5]}",
        )


@pytest.fixture
def producer(cluster: Cluster) -> Iterator[Producer]:
    with Producer(cluster.registry.address, "test-pg") as made:
        yield made


@pytest.fixture
def consumers(cluster: Cluster) -> Iterator[Callable[..., PushConsumer]]:
    """``consumers(group, {topic: expr}, listener, **options)``: started, shut down at the end."""
    made: list[PushConsumer] = []

    def start(
        group: str, subscriptions: dict[str, str], listener: Any, **options: Any
    ) -> PushConsumer:
        consumer = PushConsumer(
            cluster.registry.address,
            group,
            subscriptions,
            listener,
            options=PushConsumerOptions(**{**FAST, **options}),
        )
        made.append(consumer)
        return consumer.start()

    yield start
    for consumer in made:
        consumer.shutdown()


def send_all(
    producer: Producer, topic: str, bodies: list[bytes], **fields: Any
) -> list[SendResult]:
    results = [producer.send(Message(topic=topic, body=b, **fields)) for b in bodies]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    return results


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i:04d}".encode() for i in range(count)]


def group_lag(cluster: Cluster, group: str, topic: str) -> int | None:
    """Messages of ``topic`` not yet committed by ``group`` (None before any heartbeat)."""
    chan = sync_channel(cluster.broker.address)
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(chan)
        try:
            progress = stub.GroupProgress(broker_pb2.GroupProgressRequest(group=group), timeout=5)
        except grpc.RpcError:
            return None  # the group is not known yet, or the broker is restarting
        return sum(q.lag for q in progress.queues if q.topic == topic)
    finally:
        chan.close()


def pull_everything(cluster: Cluster, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic``, queue by queue, with a PullConsumer."""
    out: list[ReceivedMessage] = []
    with PullConsumer(cluster.registry.address, "probe") as puller:
        for queue in puller.queues(topic):
            offset = 0
            while True:
                result = puller.pull(queue, offset)
                if result.status is not PullStatus.FOUND:
                    break
                out += result.messages
                offset = result.next_begin_offset
    return out


# ===================================================================== round trips
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


# ===================================================================== groups
def test_two_consumers_split_the_queues_and_one_takes_over_after_a_shutdown(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    send_all(producer, "shared", [b"seed"])  # creates the topic with 4 queues
    first, second = Collector(), Collector()
    c1 = consumers("cg-split", {"shared": "*"}, first)
    c2 = consumers("cg-split", {"shared": "*"}, second)
    every = {MessageQueue("shared", "broker-a", q) for q in range(QUEUES)}
    wait_until(
        lambda: len(c1.assigned) == len(c2.assigned) == QUEUES // 2,
        "the two members to share the queues",
    )
    assert not set(c1.assigned) & set(c2.assigned)
    assert set(c1.assigned) | set(c2.assigned) == every

    before = bodies("before", 40)
    send_all(producer, "shared", before)
    wait_until(
        lambda: set(before) <= set(first.bodies()) | set(second.bodies()),
        "the group to consume everything",
    )
    assert first.bodies() and second.bodies()  # both members consumed
    assert {g.queue_id for g in first.got if g.body != b"seed"} <= {q.queue_id for q in c1.assigned}

    c2.shutdown()
    wait_until(lambda: set(c1.assigned) == every, "the survivor to own every queue")
    after = bodies("after", 40)
    send_all(producer, "shared", after)
    first.wait_for(set(after), "the survivor to consume the whole topic")


CONSUMER_SCRIPT = """
import sys, threading, time
from boltmq import PushConsumer, PushConsumerOptions

registry, topic, group = sys.argv[1:4]
lock = threading.Lock()  # whole lines: the listener and the main thread both write

def say(line):
    with lock:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()

def listener(messages):
    for m in messages:
        say("GOT " + bytes(m.body).decode())

consumer = PushConsumer(registry, group, {topic: "*"}, listener, options=PushConsumerOptions(
    rebalance_interval_ms=300, long_poll_ms=2000, commit_interval_ms=200))
consumer.start()
while True:
    say("ASSIGNED " + str(len(consumer.assigned)))
    time.sleep(0.1)
"""


class ConsumerProcess:
    """A PushConsumer in its own process, its stdout lines collected by a thread."""

    def __init__(self, registry: str, topic: str, group: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER_SCRIPT, registry, topic, group],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def assigned(self) -> int:
        counts = [int(line.split()[1]) for line in self.lines if line.startswith("ASSIGNED")]
        return counts[-1] if counts else 0

    def got(self) -> set[bytes]:
        return {line[4:].encode() for line in self.lines if line.startswith("GOT ")}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)


def test_a_killed_member_is_expired_by_the_broker_and_its_queues_taken_over(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    send_all(producer, "crash", [b"seed"])
    survivor = Collector()
    other = ConsumerProcess(cluster.registry.address, "crash", "cg-crash")
    try:
        c1 = consumers("cg-crash", {"crash": "*"}, survivor)
        wait_until(
            lambda: len(c1.assigned) == QUEUES // 2 and other.assigned() == QUEUES // 2,
            "the in-process and the child consumer to share the queues",
        )
        before = bodies("before", 40)
        send_all(producer, "crash", before)
        wait_until(
            lambda: set(before) <= set(survivor.bodies()) | other.got(),
            "the two members to consume everything",
        )
        assert other.got(), "the child consumer consumed nothing"
    finally:
        other.kill()  # SIGKILL: no unregister, no last commit; only expiry removes it

    wait_until(lambda: len(c1.assigned) == QUEUES, "the survivor to own every queue")
    after = bodies("after", 40)
    send_all(producer, "crash", after)
    survivor.wait_for(set(after), "the survivor to consume the dead member's queues")


def test_broadcasting_delivers_every_message_to_every_member(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    send_all(producer, "news", [b"seed"])
    members = [Collector() for _ in range(3)]
    started = [consumers("cg-news", {"news": "*"}, m, model="BROADCASTING") for m in members]
    wait_until(
        lambda: all(len(c.assigned) == QUEUES for c in started), "every member to read every queue"
    )
    sent = bodies("news", 30)
    send_all(producer, "news", sent)
    for member in members:
        member.wait_for(set(sent) | {b"seed"}, "a broadcast member")
        assert Counter(member.bodies()) == Counter(set(sent) | {b"seed"})


# ===================================================================== offsets
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


# ===================================================================== topics & pulls
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


# ===================================================================== bad input
def test_bad_sdk_inputs_raise_clear_named_errors(cluster: Cluster, producer: Producer) -> None:
    registry = cluster.registry.address
    with pytest.raises(MessageError, match="topic"):
        producer.send(Message(topic="", body=b"x"))
    with pytest.raises(MessageError, match="body must be bytes"):
        producer.send(Message(topic="t", body="text"))  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="keys"):
        producer.send(Message(topic="t", body=b"x", keys="order-1"))
    with pytest.raises(MessageError, match="body must be bytes"):
        producer.send_async(Message(topic="t", body=None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same topic"):
        producer.send_batch([Message(topic="a", body=b"x"), Message(topic="b", body=b"x")])
    with pytest.raises(ValueError, match="subscription"):
        PushConsumer(registry, "cg", {"t": "A ||"}, lambda msgs: None)
    with pytest.raises(ValueError, match="model"):
        PushConsumer(
            registry,
            "cg",
            {"t": "*"},
            lambda msgs: None,
            options=PushConsumerOptions(model="SOMETIMES"),
        )
    for option in ("consume_threads", "pull_batch_size", "pull_max_bytes"):
        for value in (0, -1):
            with pytest.raises(ValueError, match="must be positive"):
                PushConsumer(
                    registry,
                    "cg",
                    {"t": "*"},
                    lambda msgs: None,
                    options=PushConsumerOptions(**{option: value}),
                )
    with pytest.raises(ValueError, match="registry"):
        Producer("no-port-here")
    never = PushConsumer(registry, "cg-none", {"no-such-topic": "*"}, lambda msgs: None)
    with pytest.raises(TopicNotFound, match="no-such-topic"):
        never.start()
    never.shutdown()  # a consumer that failed to start still closes quietly
    producer.send(Message(topic="known", body=b"x"))  # the broker creates it
    wait_until(lambda: "known" not in producer.client.routes(["known"]), "the route of known")
    several = PushConsumer(
        registry,
        "cg-several",
        dict.fromkeys(["known", "no-such-a", "no-such-b", "no-such-c"], "*"),
        lambda msgs: None,
    )
    with pytest.raises(TopicNotFound, match=r"'no-such-a'.*nor 2 more") as caught:
        several.start()  # one registry call named them all; the first is named
    assert caught.value.topic == "no-such-a"
    several.shutdown()
    with PullConsumer(registry, "cg") as puller, pytest.raises(TopicNotFound):
        puller.queues("no-such-topic")
    told = Producer(registry, "pg-told").start(["known", "not-yet"])
    try:  # the known topic's route came with start; the unknown one is created by its send
        assert [r.status for r in told.send_batch([Message(topic="not-yet", body=b"x")])] == [
            SendStatus.SEND_OK
        ]
        assert told.send(Message(topic="known", body=b"y")).status is SendStatus.SEND_OK
    finally:
        told.shutdown()
    idle = Producer(registry)
    with pytest.raises(BoltMQError, match="not started"):
        idle.send(Message(topic="t", body=b"x"))


def test_an_unreachable_registry_raises_registry_unavailable(cluster: Cluster) -> None:
    dead = "127.0.0.1:1"
    with Producer(dead, "pg") as producer, pytest.raises(RegistryUnavailable, match=dead):
        producer.send(Message(topic="t", body=b"x"))
    told = Producer(dead, "pg")
    with pytest.raises(RegistryUnavailable, match=dead):  # the topics' routes, at start
        told.start(["t", "u"])
    told.shutdown()
    with pytest.raises(RegistryUnavailable, match=dead):
        PushConsumer(dead, "cg", {"t": "*"}, lambda msgs: None).start()
    with PullConsumer(dead, "cg") as puller, pytest.raises(RegistryUnavailable, match=dead):
        puller.queues("t")
