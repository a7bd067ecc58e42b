"""``python -m bench.rocketmq_client``: the official RocketMQ 5 Python client beside BoltMQ's SDK.

Starts a registry, a store and a broker (ports 0, a temporary directory) and runs the same
work, one after the other in the same run, with

- the official client ``rocketmq-python-client`` (pinned, in ``.venv-rocketmq``: ``make
  rocketmq-clients``; driven by ``clients/rocketmq-python/bench_worker.py`` in its own
  process, since its ``apache.rocketmq.v2`` modules must not meet BoltMQ's), speaking the
  RocketMQ 5 gRPC protocol to the broker (docs/rocketmq-clients.md);
- BoltMQ's SDK (``boltmq.Producer``, ``boltmq.SimpleConsumer``) in this process.

Work: ``--messages`` of ``--size`` bytes sent one at a time (``send``) from ``--threads``
threads, waiting for each; the same with the clients' async sends (the official
``send_async``, BoltMQ's ``Producer.send_async``; at most 32 a thread in flight); then a
SimpleConsumer receives what the sync run sent, 32 a call, acking each message. Each side
uses its own topics. Printed per work and client: msg/s, MB/s, p50/p99 latency (a send
each; a receive call each) and BoltMQ's rate over the official client's. The clock starts
after the client started (routes fetched). Short by default; figures and the command that
made them are in bench/RESULTS.md. It prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.mqtt_compare import STORE_SETTINGS
from boltmq import Message, Producer, SimpleConsumer
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2

REPO_ROOT = Path(__file__).resolve().parents[1]
RMQ_PYTHON = REPO_ROOT / ".venv-rocketmq" / "bin" / "python"
WORKER = REPO_ROOT / "clients" / "rocketmq-python" / "bench_worker.py"
IN_FLIGHT_PER_THREAD = 32
RECEIVE_BATCH = 32
GIVE_UP_S = 120.0
QUEUES = 4


@dataclass
class Run:
    """One work's outcome for one client."""

    count: int
    seconds: float
    latencies_ms: list[float]

    def line(self, size: int) -> str:
        rate = self.count / self.seconds if self.seconds else 0.0
        ordered = sorted(self.latencies_ms) or [0.0]
        p50 = ordered[len(ordered) // 2]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        mb = rate * size / 1e6
        return f"{rate:>9,.0f} msg/s {mb:>6.2f} MB/s p50 {p50:>6.2f} ms p99 {p99:>7.2f} ms"

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


def official(endpoint: str, mode: str, topic: str, args: argparse.Namespace) -> Run:
    """The official client's run of ``mode`` (bench_worker.py in .venv-rocketmq)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory(prefix="rmq-bench-") as home:  # the client logs there
        done = subprocess.run(
            [str(RMQ_PYTHON), str(WORKER), endpoint, mode, topic]
            + [str(args.messages), str(args.threads), str(args.size), "bench-official"],
            capture_output=True,
            text=True,
            timeout=GIVE_UP_S * 2,
            env={**env, "HOME": home},
            check=True,
        )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return Run(answer["count"], answer["seconds"], answer["latencies_ms"])


def boltmq_send(registry: str, topic: str, args: argparse.Namespace, mode: str) -> Run:
    body, latencies, lock = b"x" * args.size, [], threading.Lock()
    with Producer(registry, group="bench-sdk") as producer:
        producer.start([topic])
        start = time.perf_counter()
        if mode == "sync":
            share = [args.messages // args.threads] * args.threads
            share[0] += args.messages % args.threads

            def sender(n: int) -> None:
                mine = []
                for _ in range(n):
                    began = time.perf_counter()
                    producer.send(Message(topic=topic, body=body))
                    mine.append((time.perf_counter() - began) * 1000)
                with lock:
                    latencies.extend(mine)

            workers = [threading.Thread(target=sender, args=(n,)) for n in share]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        else:
            window = threading.Semaphore(args.threads * IN_FLIGHT_PER_THREAD)
            futures = []
            for _ in range(args.messages):
                window.acquire()
                began = time.perf_counter()
                future = producer.send_async(Message(topic=topic, body=body))

                def finished(_: object, began: float = began) -> None:
                    with lock:
                        latencies.append((time.perf_counter() - began) * 1000)
                    window.release()

                future.add_done_callback(finished)
                futures.append(future)
            for future in futures:
                future.result(timeout=GIVE_UP_S)  # a failed send ends the run with its error
        seconds = time.perf_counter() - start
    return Run(args.messages, seconds, latencies)


def boltmq_receive(registry: str, topic: str, count: int) -> Run:
    latencies: list[float] = []
    got, deadline = 0, time.time() + GIVE_UP_S
    with SimpleConsumer(registry, "bench-sdk", subscriptions={topic: "*"}) as consumer:
        start = time.perf_counter()
        while got < count and time.time() < deadline:
            began = time.perf_counter()
            messages = consumer.receive(RECEIVE_BATCH, wait_ms=5000)
            latencies.append((time.perf_counter() - began) * 1000)
            for message in messages:
                consumer.ack(message)
            got += len(messages)
        seconds = time.perf_counter() - start
    return Run(got, seconds, latencies)


def create_topics(broker: str, *topics: str) -> None:
    stub = broker_pb2_grpc.BrokerServiceStub(sync_channel(broker))
    for name in topics:
        config = registry_pb2.TopicConfig(
            name=name, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6
        )
        stub.UpsertTopic(broker_pb2.UpsertTopicRequest(topic=config), timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages a work")
    parser.add_argument("--threads", type=int, default=4, help="sending threads")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    args = parser.parse_args()
    if not RMQ_PYTHON.exists():
        raise SystemExit(f"{RMQ_PYTHON} is missing: run make rocketmq-clients")
    with tempfile.TemporaryDirectory(prefix="bench-rmq-") as work:
        cluster = LocalCluster(ClusterSpec(Path(work), store_settings=STORE_SETTINGS)).start()
        try:
            assert cluster.registry is not None and cluster.members[0].broker is not None
            registry, broker = cluster.registry.address, cluster.members[0].broker.address
            create_topics(broker, "BenchRmqSync", "BenchRmqAsync", "BenchSdkSync", "BenchSdkAsync")
            time.sleep(1.5)  # the topics reach the registry (one registration round)
            print(
                f"{args.messages} messages of {args.size} B, {args.threads} threads; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            rows = [
                (
                    "send (sync)",
                    official(broker, "sync", "BenchRmqSync", args),
                    boltmq_send(registry, "BenchSdkSync", args, "sync"),
                ),
                (
                    "send (async)",
                    official(broker, "async", "BenchRmqAsync", args),
                    boltmq_send(registry, "BenchSdkAsync", args, "async"),
                ),
                (
                    "receive+ack",
                    official(broker, "receive", "BenchRmqSync", args),
                    boltmq_receive(registry, "BenchSdkSync", args.messages),
                ),
            ]
        finally:
            cluster.stop()
    for work_name, theirs, ours in rows:
        print(f"{work_name:<13} official {theirs.line(args.size)}")
        print(f"{'':<13} BoltMQ   {ours.line(args.size)}")
        ratio = ours.rate / theirs.rate if theirs.rate else float("nan")
        print(f"{'':<13} BoltMQ / official {ratio:.2f}x ({theirs.count} / {ours.count} msgs)")


if __name__ == "__main__":
    main()
