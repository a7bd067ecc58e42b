"""Sustained produce and consume load for the fault tests, with a ledger of what happened.

:class:`Load` runs producer threads (the SDK's Producer, batches of small
messages, no SDK retries: a body is sent once, so an acknowledged body must be
stored exactly once and an unacknowledged one at most once) and one consumer
thread (the SDK's PullConsumer: pull, then commit; after any failure it asks
the broker for its committed offsets again and resumes there, as a restarted
consumer does). Every acknowledgement, pull and resume is recorded for the
tests to compare with the files. Failures while a process is down are expected
and only counted.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from boltmq import Message, Producer, ProducerOptions, PullConsumer
from boltmq.client import BoltMQError
from boltmq.kernel.registry_client import RegistryError
from boltmq.message import MessageQueue, SendStatus
from tests.waiting import wait_until

TOPIC = "Reliability"
GROUP = "reliability-consumers"
BATCH = 8
PRODUCERS = 2
PULL_BATCH = 64
PAUSE_AFTER_FAILURE_S = 0.05
"""Back-off of a client thread after a failed call (a process is down)."""
CLIENT_ERRORS = (BoltMQError, RegistryError)
"""What the SDK raises when a process is down or a call is refused."""
WAIT_S = 60.0
"""Bound of every wait for progress (a state to reach, never a speed to meet)."""


@dataclass(frozen=True)
class Ack:
    """Where an acknowledged message was stored."""

    queue_id: int
    queue_offset: int
    commitlog_offset: int


@dataclass
class Ledger:
    """What the clients saw; guarded by ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[bytes, Ack] = field(default_factory=dict)
    send_failures: int = 0
    last_send_error: str = ""
    """The newest failed send's error (what a stalled phase reports)."""
    consumed: dict[int, dict[int, bytes]] = field(default_factory=dict)
    """queue id -> queue offset -> body, every message the consumer processed."""
    processed_end: dict[int, int] = field(default_factory=dict)
    """queue id -> the offset after the last processed message."""
    skips: list[str] = field(default_factory=list)
    """Resumes past the processed end: messages a consumer never saw."""
    resumes: int = 0
    pull_failures: int = 0

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def snapshot(self) -> dict[bytes, Ack]:
        with self.lock:
            return dict(self.acked)


class Load:
    """Producers and a consumer against the cluster whose registry is ``registry``."""

    def __init__(
        self, registry: str, *, producers: int = PRODUCERS, consume: bool = True, topic: str = TOPIC
    ) -> None:
        self.registry = registry
        self.topic = topic
        self.ledger = Ledger()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._produce, args=(n,), daemon=True, name=f"load-producer-{n}"
            )
            for n in range(producers)
        ]
        self._consumer = (
            threading.Thread(target=self._consume, daemon=True, name="load-consumer")
            if consume
            else None
        )

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        self.wait_acks(1)  # the topic exists before the consumer looks for its queues
        if self._consumer is not None:
            self._consumer.start()
        return self

    def stop_producing(self) -> None:
        self._stop_producing.set()
        for thread in self._threads:
            thread.join(WAIT_S)

    def drain(self) -> None:
        """Stop producing, let the consumer reach the end of every queue, stop it."""
        self.stop_producing()
        if self._consumer is None:
            return
        acked = self.ledger.snapshot()
        ends: dict[int, int] = {}
        for ack in acked.values():
            ends[ack.queue_id] = max(ends.get(ack.queue_id, 0), ack.queue_offset + 1)

        def caught_up() -> bool:
            with self.ledger.lock:
                done = dict(self.ledger.processed_end)
            return all(done.get(q, 0) >= end for q, end in ends.items())

        wait_until(caught_up, "the consumer processed every acknowledged message", WAIT_S)
        self._stop_consuming.set()
        self._consumer.join(WAIT_S)

    def stop(self) -> None:
        self._stop_producing.set()
        self._stop_consuming.set()
        for thread in [*self._threads, self._consumer]:
            if thread is not None and thread.is_alive():
                thread.join(WAIT_S)

    def wait_acks(self, more: int) -> None:
        """Block until ``more`` further messages are acknowledged (bounded)."""
        target = self.ledger.acked_count() + more
        try:
            wait_until(
                lambda: self.ledger.acked_count() >= target,
                f"{target} messages are acknowledged",
                WAIT_S,
            )
        except AssertionError as exc:
            with self.ledger.lock:
                failures, error = self.ledger.send_failures, self.ledger.last_send_error
            alive = sum(thread.is_alive() for thread in self._threads)
            raise AssertionError(
                f"{exc} ({self.ledger.acked_count()} are; {failures} sends "
                f"failed, the last with {error!r}; {alive} of "
                f"{len(self._threads)} producer threads alive)"
            ) from None

    # ---------------------------------------------------------------- producers
    def _produce(self, number: int) -> None:
        producer = Producer(
            self.registry,
            f"reliability-producer-{number}",
            options=ProducerOptions(retry_times=0, send_timeout_ms=3000),
        )
        producer.start()
        try:
            for batch in itertools.count():
                if self._stop_producing.is_set():
                    return
                bodies = [f"p{number}-b{batch}-m{m}".encode() for m in range(BATCH)]
                self._send(producer, bodies)
        finally:
            producer.shutdown()

    def _send(self, producer: Producer, bodies: list[bytes]) -> None:
        try:
            results = producer.send_batch([Message(self.topic, body) for body in bodies])
        except CLIENT_ERRORS as exc:
            with self.ledger.lock:
                self.ledger.send_failures += 1
                self.ledger.last_send_error = str(exc)
            time.sleep(PAUSE_AFTER_FAILURE_S)
            return
        with self.ledger.lock:
            for body, result in zip(bodies, results, strict=True):
                if result.status is SendStatus.SEND_OK:
                    self.ledger.acked[body] = Ack(
                        result.queue.queue_id, result.queue_offset, result.commitlog_offset
                    )
                else:
                    self.ledger.send_failures += 1
                    self.ledger.last_send_error = f"{result.put_status}: {result.error}"

    # ---------------------------------------------------------------- consumer
    def _consume(self) -> None:
        consumer = PullConsumer(self.registry, GROUP, rpc_timeout_ms=3000)
        try:
            positions: dict[MessageQueue, int] = {}
            while not self._stop_consuming.is_set():
                try:
                    if not positions:
                        positions = self._resume(consumer)
                    for queue in positions:
                        positions[queue] = self._pull_once(consumer, queue, positions[queue])
                except CLIENT_ERRORS:
                    with self.ledger.lock:
                        self.ledger.pull_failures += 1
                    positions = {}  # resume from the committed offsets
                    time.sleep(PAUSE_AFTER_FAILURE_S)
        finally:
            consumer.shutdown()

    def _resume(self, consumer: PullConsumer) -> dict[MessageQueue, int]:
        """Committed offsets of every queue; a resume past what was processed is a skip."""
        positions = {}
        for queue in consumer.queues(self.topic):
            committed = max(consumer.committed(queue), 0)
            positions[queue] = committed
            with self.ledger.lock:
                processed = self.ledger.processed_end.get(queue.queue_id, 0)
                if committed > processed:
                    self.ledger.skips.append(
                        f"{queue}: resumed at {committed}, processed up to {processed}"
                    )
        with self.ledger.lock:
            self.ledger.resumes += 1
        return positions

    def _pull_once(self, consumer: PullConsumer, queue: MessageQueue, offset: int) -> int:
        result = consumer.pull(queue, offset, PULL_BATCH)
        if not result.messages:
            return (
                max(offset, result.next_begin_offset)
                if result.next_begin_offset > offset
                else offset
            )
        with self.ledger.lock:
            seen = self.ledger.consumed.setdefault(queue.queue_id, {})
            for message in result.messages:
                seen[message.queue_offset] = message.body_bytes()
            end = result.messages[-1].queue_offset + 1
            if end > self.ledger.processed_end.get(queue.queue_id, 0):
                self.ledger.processed_end[queue.queue_id] = end
        consumer.commit(queue, result.next_begin_offset)
        return result.next_begin_offset
