"""``python -m bench produce|consume|e2e|redis``: benchmarks against a running cluster.

- ``produce``: ``--concurrency`` threads each send ``--batch`` messages per call
  (``send_batch``; batch 1 is a synchronous ``send``); latency per call. The
  threads share one Producer: ``--concurrency 64 --batch 1`` is 64 senders each
  waiting for its result, which natural batching serves
  (``--no-natural-batching``: one call per send, for an A/B).
- ``consume``: a PushConsumer of a fresh group reads ``--count`` messages that
  are already in the topic (produce first), 1024 per pull; throughput only.
- ``e2e``: a consumer long-polls while a producer sends one message at a time
  at ``--rate``; latency from send to the listener (the long poll's wake-up).
- ``redis``: the reference: XADD of the same bodies, pipelined ``--batch`` at a
  time, to a Redis server (``--redis``), with redis-py.

Bodies are ``--size`` bytes. These print numbers; they assert nothing. The
bench process keeps freed memory in its heap (:mod:`boltmq.kernel.allocator`, as the
servers do), which an application moving large batches may do too.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from bench.report import BenchResult, result, timed_threads
from boltmq.kernel import allocator
from boltmq.message import Message
from boltmq.options import ProducerOptions, PushConsumerOptions
from boltmq.producer import Producer
from boltmq.push_consumer import PushConsumer

SEND_TIME = struct.Struct(">q")
NO_SECURITY: Mapping[str, Any] = {}
"""``sdk`` of a plaintext, unsigned run; else ``tls`` / ``credentials`` for the SDK
(``python -m bench ... --tls-ca/--access-key``, :func:`boltmq.cli.security.sdk_options`)."""
CONSUME_PULL_BATCH = 1024
"""Messages per pull in ``consume``: each gRPC call costs the consumer, broker and store
a few hundred microseconds whatever it carries, so 1024 per pull (about 1.1 MB) needs
a quarter of the calls of 256 (bench/history/cluster.md: broker CPU halved)."""


def bench_produce(
    registry: str,
    topic: str,
    count: int,
    size: int,
    batch: int,
    concurrency: int,
    sdk: Mapping[str, Any] = NO_SECURITY,
    natural_batching: bool = True,
) -> BenchResult:
    allocator.keep_freed_memory()
    body = b"x" * size
    per_thread = max(1, count // concurrency // batch)
    options = ProducerOptions(natural_batching=natural_batching)
    with Producer(registry, "BENCH_PRODUCER", options=options, **sdk) as producer:
        producer.send(Message(topic=topic, body=body))  # routes and channels warm
        allocator.settle_garbage_collector()  # as the servers do (boltmq/kernel/allocator.py)

        def setup(_n: int) -> Callable[[], object]:
            messages = [Message(topic=topic, body=body) for _ in range(batch)]
            if batch == 1:
                return lambda: producer.send(messages[0])
            return lambda: producer.send_batch(messages)

        seconds, samples = timed_threads(concurrency, setup, per_thread)
    return result(
        "produce",
        per_thread * batch * concurrency,
        seconds,
        size,
        samples,
        f"batch {batch}, {concurrency} threads, natural batching "
        f"{'on' if natural_batching else 'off'}, latency per call",
    )


def bench_consume(
    registry: str, topic: str, count: int, size: int, sdk: Mapping[str, Any] = NO_SECURITY
) -> BenchResult:
    allocator.keep_freed_memory()
    received = 0
    done = threading.Event()
    lock = threading.Lock()
    first: list[float] = []

    def listener(messages: list) -> None:
        nonlocal received
        with lock:
            if not first:
                first.append(time.perf_counter())
            received += len(messages)
            if received >= count:
                done.set()

    group = f"BENCH_CONSUMER_{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    consumer = PushConsumer(
        registry,
        group,
        {topic: "*"},
        listener,
        options=PushConsumerOptions(
            pull_batch_size=CONSUME_PULL_BATCH, consume_batch_max_size=256, long_poll_ms=1000
        ),
        **sdk,
    ).start()
    try:
        if not done.wait(600):
            raise TimeoutError(f"only {received} of {count} messages arrived")
        seconds = time.perf_counter() - start
    finally:
        consumer.shutdown()
    # The rate counts the consumer's start-up too (routes, rebalance, first pulls).
    return result(
        "consume",
        received,
        seconds,
        size,
        [],
        f"fresh group from the first offset, {len(consumer.assigned) or 'all'} "
        f"queues, first message after {first[0] - start:.2f} s",
    )


def bench_e2e(
    registry: str,
    topic: str,
    count: int,
    size: int,
    rate: int,
    sdk: Mapping[str, Any] = NO_SECURITY,
) -> BenchResult:
    """Send-to-receive latency with the consumer parked in a long poll."""
    samples: list[int] = []
    done = threading.Event()
    lock = threading.Lock()

    def listener(messages: list) -> None:
        now = time.perf_counter_ns()
        with lock:
            for m in messages:
                samples.append(now - SEND_TIME.unpack_from(m.body)[0])
            if len(samples) >= count:
                done.set()

    group = f"BENCH_E2E_{uuid.uuid4().hex[:8]}"
    with Producer(registry, "BENCH_E2E_PRODUCER", **sdk) as producer:
        producer.send(Message(topic=topic, body=b"warm-up"))
        consumer = PushConsumer(
            registry,
            group,
            {topic: "*"},
            listener,
            options=PushConsumerOptions(consume_from="LAST", long_poll_ms=15_000),
            **sdk,
        ).start()
        try:
            time.sleep(1.0)  # let every queue's first long poll park
            interval = 1.0 / rate
            pad = b"x" * max(0, size - SEND_TIME.size)
            start = time.perf_counter()
            for n in range(count):
                producer.send(
                    Message(topic=topic, body=SEND_TIME.pack(time.perf_counter_ns()) + pad)
                )
                pause = start + (n + 1) * interval - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            if not done.wait(60):
                raise TimeoutError(f"only {len(samples)} of {count} messages arrived")
            seconds = time.perf_counter() - start
        finally:
            consumer.shutdown()
    return result(
        "e2e", len(samples), seconds, size, samples, f"send-to-listener latency at {rate} msg/s"
    )


def bench_redis(url: str, count: int, size: int, batch: int) -> BenchResult:
    """XADD pipelined ``batch`` at a time: the reference produce rate."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        raise ValueError(f"redis at {url}: {exc}") from None
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    body = b"x" * size
    samples = []
    rounds = max(1, count // batch)
    try:
        start = time.perf_counter()
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            pipe = client.pipeline(transaction=False)
            for _ in range(batch):
                pipe.xadd(stream, {"body": body})
            pipe.execute()
            samples.append(time.perf_counter_ns() - t0)
        seconds = time.perf_counter() - start
    finally:
        client.delete(stream)
        client.close()
    return result(
        "redis",
        rounds * batch,
        seconds,
        size,
        samples,
        f"XADD pipelined {batch} per round trip, latency per pipeline",
    )
