"""AsyncProducer against threads: ``--senders`` asyncio tasks awaiting sends, against as
many threads calling ``Producer.send``, on one ``boltmq dev``, rounds alternated.

Each sender sends one 1 KiB message and waits for its result, over and over, for
``--seconds``; the tasks share one AsyncProducer (``concurrency`` = senders), the
threads one Producer, so both batch naturally and share one send stream. Prints
msg/s and the p50 / p99 of a send for each round; the ratio of the two is what
the bridge over threads costs or gains (boltmq/async_producer.py says why it is
a bridge).

    .venv/bin/python -m bench.async_send [--senders 64] [--seconds 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

from bench.compare.boltmq_peer import BoltMQPeer
from bench.soak_report import percentile_ms
from boltmq.async_producer import AsyncProducer
from boltmq.message import Message
from boltmq.producer import Producer

BODY = b"x" * 1024


def threads(registry: str, topic: str, senders: int, seconds: float) -> tuple[int, list[int]]:
    """Messages sent and per-send nanoseconds of ``senders`` threads sharing one Producer."""
    samples: list[list[int]] = [[] for _ in range(senders)]
    producer = Producer(registry, "ASYNC_BENCH_T").start([topic])
    try:
        stop_at = time.monotonic() + seconds

        def sender(n: int) -> None:
            while time.monotonic() < stop_at:
                t0 = time.perf_counter_ns()
                producer.send(Message(topic, BODY))
                samples[n].append(time.perf_counter_ns() - t0)

        workers = [threading.Thread(target=sender, args=(n,)) for n in range(senders)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        producer.shutdown()
    flat = [s for per in samples for s in per]
    return len(flat), flat


async def tasks(registry: str, topic: str, senders: int, seconds: float) -> tuple[int, list[int]]:
    """The same with ``senders`` asyncio tasks sharing one AsyncProducer."""
    samples: list[int] = []
    producer = await AsyncProducer(registry, "ASYNC_BENCH_A", concurrency=senders).start([topic])
    try:
        stop_at = time.monotonic() + seconds

        async def sender() -> None:
            while time.monotonic() < stop_at:
                t0 = time.perf_counter_ns()
                await producer.send(Message(topic, BODY))
                samples.append(time.perf_counter_ns() - t0)

        await asyncio.gather(*(sender() for _ in range(senders)))
    finally:
        await producer.shutdown()
    return len(samples), samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.senders <= 0 or args.seconds <= 0 or args.rounds <= 0:
        parser.error("--senders, --seconds and --rounds must be positive")
    peer = BoltMQPeer()
    with tempfile.TemporaryDirectory(prefix="async-send-") as tmp:
        peer.start(Path(tmp))
        try:
            topic = peer.create_topics("async", 1)[0]
            for n in range(args.rounds):
                for kind in ("threads", "tasks") if n % 2 == 0 else ("tasks", "threads"):
                    if kind == "threads":
                        count, lat = threads(peer.registry, topic, args.senders, args.seconds)
                    else:
                        count, lat = asyncio.run(
                            tasks(peer.registry, topic, args.senders, args.seconds)
                        )
                    print(
                        f"round {n + 1} {kind:<7} {args.senders} senders: "
                        f"{count / args.seconds:,.0f} msg/s, p50 {percentile_ms(lat, 0.5)} ms, "
                        f"p99 {percentile_ms(lat, 0.99)} ms",
                        flush=True,
                    )
        finally:
            peer.stop()


if __name__ == "__main__":
    main()
