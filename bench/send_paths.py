"""BoltMQ's send paths side by side on one ``boltmq dev``: unary calls, the send stream, and
the AsyncProducer over it, with the CPU each costs per message.

Each round runs, for each sender count of ``--senders`` (1 and 64 by default), three
modes in turn (the order rotates from round to round, so a drift of the shared
machine's load falls on each mode alike):

- ``unary``: threads sharing one Producer with ``send_path="unary"``;
- ``stream``: threads sharing one Producer on the default send stream;
- ``async``: asyncio tasks sharing one AsyncProducer (``concurrency`` = senders).

Each sender sends one 1 KiB message and waits for its result, over and over, for
``--seconds``; concurrent senders batch naturally on every path. Printed per run:
msg/s, the p50 / p99 of a send, and the CPU seconds per message of the cluster's
processes (registry, store, broker, HA: ``boltmq dev``'s children) and of this
client process. CPU per message is the steadier figure on a loaded machine.

    .venv/bin/python -m bench.send_paths [--senders 1 --senders 64] [--seconds 3] [--rounds 2]
        [--topics 64] [--mode stream] [--colocate]

``--colocate``: each broker serves its store in one process (``boltmq dev --colocate``).
``--topics``: the senders spread over that many topics (sender ``n`` on topic ``n``
modulo the count): with more than one, concurrent sends of several topics share a
request only on the default send stream (``sections``, :mod:`boltmq.send_request`).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bench.compare.boltmq_peer import BoltMQPeer
from bench.soak_report import percentile_ms
from boltmq.async_producer import AsyncProducer
from boltmq.message import Message
from boltmq.options import ProducerOptions
from boltmq.producer import Producer

BODY = b"x" * 1024
MODES = ("unary", "stream", "async")


def threads(
    registry: str, topics: list[str], senders: int, seconds: float, send_path: str
) -> list[int]:
    """Per-send nanoseconds of ``senders`` threads sharing one Producer (sender ``n`` on
    topic ``n`` modulo the topics)."""
    samples: list[list[int]] = [[] for _ in range(senders)]
    options = ProducerOptions(send_path=send_path)
    producer = Producer(registry, "SEND_PATHS", options=options).start(topics)
    try:
        for topic in topics[:2]:  # connected, the stream open and its headers known first
            producer.send(Message(topic, BODY))
        stop_at = time.monotonic() + seconds

        def sender(n: int) -> None:
            topic = topics[n % len(topics)]
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
    return [s for per in samples for s in per]


async def tasks(registry: str, topics: list[str], senders: int, seconds: float) -> list[int]:
    """The same with ``senders`` asyncio tasks sharing one AsyncProducer."""
    samples: list[int] = []
    producer = await AsyncProducer(registry, "SEND_PATHS", concurrency=senders).start(topics)
    try:
        for topic in topics[:2]:
            await producer.send(Message(topic, BODY))
        stop_at = time.monotonic() + seconds

        async def sender(topic: str) -> None:
            while time.monotonic() < stop_at:
                t0 = time.perf_counter_ns()
                await producer.send(Message(topic, BODY))
                samples.append(time.perf_counter_ns() - t0)

        await asyncio.gather(*(sender(topics[n % len(topics)]) for n in range(senders)))
    finally:
        await producer.shutdown()
    return samples


def cpu_seconds(processes: list[psutil.Process]) -> float:
    """User + system CPU seconds ``processes`` have used so far."""
    return sum(float(p.cpu_times().user + p.cpu_times().system) for p in processes)


def measure(run: Callable[[], list[int]], servers: list[psutil.Process]) -> str:
    """One run's figures (module docstring)."""
    server0, client0, start = cpu_seconds(servers), time.process_time(), time.perf_counter()
    lat = run()
    elapsed = time.perf_counter() - start
    server_us = (cpu_seconds(servers) - server0) / len(lat) * 1e6
    client_us = (time.process_time() - client0) / len(lat) * 1e6
    return (
        f"{len(lat) / elapsed:,.0f} msg/s, p50 {percentile_ms(lat, 0.5)} ms, "
        f"p99 {percentile_ms(lat, 0.99)} ms; CPU per message: cluster {server_us:.0f} us, "
        f"client {client_us:.0f} us"
    )


def runner(
    mode: str, registry: str, topics: list[str], senders: int, seconds: float
) -> Callable[[], list[int]]:
    """One run of ``mode`` (MODES) as a call."""
    if mode == "async":
        return lambda: asyncio.run(tasks(registry, topics, senders, seconds))
    return lambda: threads(registry, topics, senders, seconds, mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--senders", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--topics", type=int, default=1, help="topics the senders share")
    parser.add_argument("--mode", choices=MODES, action="append", help="default: all three")
    parser.add_argument(
        "--colocate", action="store_true", help="the broker serves its store (dev --colocate)"
    )
    args = parser.parse_args()
    counts = args.senders or [1, 64]
    if min(counts) <= 0 or min(args.seconds, args.rounds, args.topics) <= 0:
        parser.error("--senders, --seconds, --rounds and --topics must be positive")
    modes = tuple(args.mode or MODES)
    peer = BoltMQPeer(colocated=args.colocate)
    with tempfile.TemporaryDirectory(prefix="send-paths-") as tmp:
        peer.start(Path(tmp))
        try:
            assert peer.proc is not None
            servers = psutil.Process(peer.proc.pid).children(recursive=True)
            topics = peer.create_topics("paths", args.topics)
            reg, secs = peer.registry, args.seconds
            for n in range(args.rounds):
                for senders in counts:
                    turn = n % len(modes)
                    for mode in modes[turn:] + modes[:turn]:
                        figures = measure(runner(mode, reg, topics, senders, secs), servers)
                        print(f"round {n + 1} {mode:<6} {senders:>3} senders: {figures}")
        finally:
            peer.stop()


if __name__ == "__main__":
    main()
