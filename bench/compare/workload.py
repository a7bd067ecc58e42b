"""The workload every system runs, and the one loop that times it.

A round has ``topics`` topics (1, 64 or 1,024), freshly made, each holding one
warm-up message. In each round, in this order:

- ``produce``: ``producers`` threads (1 or 4), each with its own client
  (made before the clock starts, told the round's topics), send for
  ``seconds``: ``batched`` sends ``batch`` bodies per call to one topic (the
  next topic each call, round-robin, threads starting apart);
  ``one-at-a-time`` sends one body per call and waits for its ack. msg/s
  counts acknowledged messages; latency is per call.
- ``produce``, ``concurrent-sends``: ``senders`` threads (64, RocketMQ's own
  benchmark) share one client (``Peer.shared_producer``), each sending one
  body per call to the next topic and waiting for its ack, for ``seconds``
  (where a client batches concurrent sends, as BoltMQ's natural batching,
  this is where it shows). The ``producers`` column holds the thread count.
- ``consume``: a new group reads the round's first ``consume_messages``
  messages from the start (topped up, untimed, if the produce runs left
  fewer). msg/s counts delivered messages from the consumer's creation to
  the last one; no latency.
- ``produce+consume``: a consumer of a new group waits at the end, then
  ``producers`` batched producers send for ``seconds``; the clock stops
  when the consumer has every acknowledged message. msg/s counts delivered
  messages; latency is send-to-delivery of each message.

Bodies are ``size`` bytes: ``BODY_HEADER`` (send time, ``perf_counter_ns``)
then padding. Every client of a run lives in this one Python process, as the
same loop for every system, so a system's figures include its Python
client's cost (see the module docstring of :mod:`bench.compare`).
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.compare.peer import ConsumerClient, Peer, PeerFailed, ProducerClient
from bench.soak_report import percentile_ms

BODY_HEADER = struct.Struct(">q")
DRAIN_TIMEOUT_S = 120.0
CONSUME_TIMEOUT_S = 300.0
MODES = ("batched", "one-at-a-time")
CONCURRENT = "concurrent-sends"
"""The mode of the many-senders-one-client run."""


@dataclass(frozen=True)
class Workload:
    """The matrix and its sizes."""

    seconds: float = 5.0
    consume_messages: int = 200_000
    size: int = 1024
    batch: int = 256
    topic_counts: tuple[int, ...] = (1, 64, 1024)
    producer_counts: tuple[int, ...] = (1, 4)
    senders: int = 64
    """Threads of the ``concurrent-sends`` run, sharing one client."""


@dataclass
class Row:
    """One scenario on one system: counts, duration and latency samples reduced."""

    system: str
    scenario: str
    mode: str
    producers: int
    topics: int
    messages: int
    seconds: float
    size: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    pass_index: int = 0
    """Which pass over every system measured it (``bench.compare --passes``), from 0."""

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.msgs_per_s * self.size / 1e6

    @property
    def key(self) -> tuple[str, str, int, int]:
        """What identifies the same scenario across systems."""
        return (self.scenario, self.mode, self.producers, self.topics)


def body(size: int) -> bytes:
    """A body stamped with the send time."""
    return BODY_HEADER.pack(time.perf_counter_ns()) + b"x" * (size - BODY_HEADER.size)


def run_round(
    peer: Peer, work: Workload, topics: Sequence[str], progress: Callable[[Row], None]
) -> list[Row]:
    """Every scenario of one round on ``peer``, in the order of the module docstring."""
    rows = []
    stored = len(topics)  # the warm-up messages
    for mode in MODES:
        for producers in work.producer_counts:
            row = produce(peer, work, topics, producers, mode)
            stored += row.messages
            rows.append(row)
            progress(row)
    row = produce_concurrently(peer, work, topics)
    stored += row.messages
    rows.append(row)
    progress(row)
    if stored < work.consume_messages:
        _top_up(peer, work, topics, work.consume_messages - stored)
    rows.append(consume(peer, work, topics))
    progress(rows[-1])
    for producers in work.producer_counts:
        rows.append(produce_and_consume(peer, work, topics, producers))
        progress(rows[-1])
    return rows


def _send_loop(
    client: ProducerClient,
    work: Workload,
    topics: Sequence[str],
    start: int,
    mode: str,
    until: Callable[[], bool],
) -> tuple[int, list[int]]:
    """Send until ``until()``; (acknowledged messages, per-call latency ns)."""
    acked, samples, n = 0, [], start
    while not until():
        topic = topics[n % len(topics)]
        n += 1
        t0 = time.perf_counter_ns()
        if mode == "batched":
            acked += client.send_batch(topic, [body(work.size) for _ in range(work.batch)])
        else:
            acked += client.send_one(topic, body(work.size))
        samples.append(time.perf_counter_ns() - t0)
    return acked, samples


def _producers(
    peer: Peer, work: Workload, topics: Sequence[str], count: int, mode: str, stop: threading.Event
) -> tuple[float, int, list[int]]:
    """``count`` producer threads until ``stop``; (seconds, acked, latency samples)."""
    clients = [peer.producer(topics) for _ in range(count)]
    results: list[tuple[int, list[int]]] = [(0, [])] * count
    errors: list[BaseException] = []
    spread = max(1, len(topics) // count)

    def worker(n: int) -> None:
        try:
            results[n] = _send_loop(clients[n], work, topics, n * spread, mode, stop.is_set)
        except BaseException as exc:  # re-raised below, on the caller's thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(count)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    for client in clients:
        client.close()
    if errors:
        raise PeerFailed(f"{peer.name} producer failed: {errors[0]!r}") from errors[0]
    return seconds, sum(r[0] for r in results), [s for r in results for s in r[1]]


def _senders(
    peer: Peer, work: Workload, topics: Sequence[str], stop: threading.Event
) -> tuple[float, int, list[int]]:
    """``work.senders`` threads sharing one client until ``stop``, each sending one body
    per call and waiting for its ack; (seconds, acked, latency samples)."""
    client = peer.shared_producer(topics)
    results: list[tuple[int, list[int]]] = [(0, [])] * work.senders
    errors: list[BaseException] = []
    spread = max(1, len(topics) // work.senders)

    def worker(n: int) -> None:
        try:
            results[n] = _send_loop(client, work, topics, n * spread, "one-at-a-time", stop.is_set)
        except BaseException as exc:  # re-raised below, on the caller's thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(work.senders)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    client.close()
    if errors:
        raise PeerFailed(f"{peer.name} concurrent sender failed: {errors[0]!r}") from errors[0]
    return seconds, sum(r[0] for r in results), [s for r in results for s in r[1]]


def produce_concurrently(peer: Peer, work: Workload, topics: Sequence[str]) -> Row:
    seconds, acked, samples = _senders(peer, work, topics, _timer(work.seconds))
    return Row(
        peer.name,
        "produce",
        CONCURRENT,
        work.senders,
        len(topics),
        acked,
        seconds,
        work.size,
        percentile_ms(samples, 0.50),
        percentile_ms(samples, 0.99),
    )


def _timer(seconds: float) -> threading.Event:
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    return stop


def produce(peer: Peer, work: Workload, topics: Sequence[str], producers: int, mode: str) -> Row:
    seconds, acked, samples = _producers(peer, work, topics, producers, mode, _timer(work.seconds))
    return Row(
        peer.name,
        "produce",
        mode,
        producers,
        len(topics),
        acked,
        seconds,
        work.size,
        percentile_ms(samples, 0.50),
        percentile_ms(samples, 0.99),
    )


def _top_up(peer: Peer, work: Workload, topics: Sequence[str], missing: int) -> None:
    client = peer.producer(topics)
    try:
        n = 0
        while missing > 0:
            missing -= client.send_batch(
                topics[n % len(topics)], [body(work.size)] * min(work.batch, missing)
            )
            n += 1
    finally:
        client.close()


def _receive(
    consumer: ConsumerClient,
    wanted: Callable[[int], bool],
    timeout_s: float,
    on_bodies: Callable[[list[bytes]], None] | None = None,
) -> tuple[int, float]:
    """Poll until ``wanted(received)`` is False; (received, time of the last delivery)."""
    received, last = 0, time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while wanted(received):
        if time.monotonic() > deadline:
            raise PeerFailed(f"only {received} messages arrived within {timeout_s:.0f} s")
        bodies = consumer.poll()
        if bodies:
            last = time.perf_counter()
            received += len(bodies)
            if on_bodies is not None:
                on_bodies(bodies)
    return received, last


def consume(peer: Peer, work: Workload, topics: Sequence[str]) -> Row:
    start = time.perf_counter()
    consumer = peer.consumer(topics, from_start=True)
    try:
        received, last = _receive(consumer, lambda n: n < work.consume_messages, CONSUME_TIMEOUT_S)
    finally:
        consumer.close()
    return Row(peer.name, "consume", "batched", 1, len(topics), received, last - start, work.size)


def produce_and_consume(peer: Peer, work: Workload, topics: Sequence[str], producers: int) -> Row:
    consumer = peer.consumer(topics, from_start=False)
    latencies: list[int] = []
    done = threading.Event()
    outcome: list[tuple[int, float]] = []
    acked_total: list[int] = []

    def stamp(bodies: list[bytes]) -> None:
        now = time.perf_counter_ns()
        latencies.extend(
            now - BODY_HEADER.unpack_from(b)[0] for b in bodies if len(b) >= BODY_HEADER.size
        )

    def wanted(received: int) -> bool:
        return not done.is_set() or received < acked_total[0]

    reader = threading.Thread(
        target=lambda: outcome.append(
            _receive(consumer, wanted, work.seconds + DRAIN_TIMEOUT_S, stamp)
        )
    )
    try:
        time.sleep(1.0)  # the consumer's first polls are parked before anything is sent
        start = time.perf_counter()
        reader.start()
        _, acked, _ = _producers(peer, work, topics, producers, "batched", _timer(work.seconds))
        acked_total.append(acked)
        done.set()
        reader.join()
    finally:
        done.set()
        consumer.close()
    if not outcome:
        raise PeerFailed(f"{peer.name}: the consumer did not receive every acked message")
    received, last = outcome[0]
    return Row(
        peer.name,
        "produce+consume",
        "batched",
        producers,
        len(topics),
        received,
        last - start,
        work.size,
        percentile_ms(latencies, 0.50),
        percentile_ms(latencies, 0.99),
    )
