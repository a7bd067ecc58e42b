"""BoltMQ in the comparison: ``boltmq dev`` (registry, store, broker) on free ports.

The script runs ``python -m boltmq.cli dev`` itself, as a user would, with every
port 0 and the data in the round's temporary directory, and reads the
registry's address from its output. Durability: ASYNC_FLUSH (a send is
acknowledged once its bytes are in the memory-mapped CommitLog; the flusher
writes them to disk every 500 ms). Producers are SDK ``Producer``s
(``send_batch`` / ``send``), on the default send stream, or on unary calls as the
system ``boltmq-unary`` (``BoltMQ unary`` rows: the ratio column then reads stream
/ unary); the consumer is a ``PushConsumer`` taking up to
1024 messages of a queue per pull, as ``python -m bench consume`` does, for any
number of topics (its 4 threads each pull their share of the queues in one
PullQueues call).
"""

from __future__ import annotations

import queue
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from bench.compare.peer import START_TIMEOUT_S, PeerFailed, stop_process
from boltmq.cli.dev.launcher import REPO_ROOT
from boltmq.kernel import allocator
from boltmq.message import Message, ReceivedMessage, SendStatus
from boltmq.options import ProducerOptions, PushConsumerOptions
from boltmq.producer import Producer
from boltmq.push_consumer import PushConsumer

DEV_SETTINGS = (
    "--store-set",
    "disk_max_used_space_ratio=100",
    "--store-set",
    "disk_space_clean_forcibly_ratio=100",
    "--store-set",
    "disk_space_warning_level_ratio=100",
    "--store-set",
    f"mapped_file_size_consume_queue={60_000 * 20}",
    "--broker-set",
    "auto_create_rate_per_s=0",
    "--broker-set",
    "auto_create_max_per_client=0",
)
"""How full this machine's disk is must not make the cleaner delete a round's data.
Consume queue files of 60,000 entries (1.2 MB) instead of the default 300,000 (6 MB):
each file is allocated in full, and 1,024 topics of 4 queues would take 24 GB of the
shared disk. (Every entry is written the same way; only rolls to a new file come
five times as often.) The broker's limits on auto-created topics per client are off: a
round of 1,024 topics creates them all from this one client within seconds."""
PULL_BATCH = 1024
ROUTE_WAIT_S = 30.0
POLL_WAIT_S = 0.1


class BoltMQProducer:
    """One SDK Producer, started with the round's topics (their routes fetched at once,
    before the timed run, not by the first send to each inside it)."""

    def __init__(self, registry: str, topics: Sequence[str], send_path: str = "stream") -> None:
        self.producer = Producer(
            registry,
            f"CMP_P_{uuid.uuid4().hex[:8]}",
            options=ProducerOptions(send_path=send_path),
        ).start(topics)

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        results = self.producer.send_batch([Message(topic=topic, body=b) for b in bodies])
        return sum(r.status is SendStatus.SEND_OK for r in results)

    def send_one(self, topic: str, body: bytes) -> int:
        self.producer.send(Message(topic=topic, body=body))
        return 1

    def close(self) -> None:
        self.producer.shutdown()


class BoltMQConsumer:
    """A PushConsumer whose listener hands bodies to :meth:`poll`."""

    def __init__(self, registry: str, topics: Sequence[str], from_start: bool) -> None:
        self.delivered: queue.SimpleQueue[list[bytes]] = queue.SimpleQueue()
        self.consumer = PushConsumer(
            registry,
            f"CMP_C_{uuid.uuid4().hex[:8]}",
            dict.fromkeys(topics, "*"),
            self._listen,
            options=PushConsumerOptions(
                consume_from="FIRST" if from_start else "LAST",
                pull_batch_size=PULL_BATCH,
                consume_batch_max_size=PULL_BATCH,
                long_poll_ms=1000,
                rebalance_interval_ms=60_000,
            ),
        ).start()

    def _listen(self, messages: list[ReceivedMessage]) -> None:
        self.delivered.put([bytes(m.body) for m in messages])

    def poll(self) -> list[bytes]:
        try:
            bodies = self.delivered.get(timeout=POLL_WAIT_S)
        except queue.Empty:
            return []
        while not self.delivered.empty():
            bodies += self.delivered.get_nowait()
        return bodies

    def close(self) -> None:
        self.consumer.shutdown()


class BoltMQPeer:
    """``boltmq dev`` as a child process."""

    name = "BoltMQ"
    durability = (
        "ASYNC_FLUSH (acked in the mmap'd CommitLog, flushed every 500 ms); "
        "consume queue files of 60,000 entries"
    )
    topic_unit = "RocketMQ-style topic of 4 queues"

    def __init__(self, send_path: str = "stream", colocated: bool = False) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.registry = ""
        self.send_path = send_path
        """How the producers send (``ProducerOptions.send_path``)."""
        if send_path != "stream":
            self.name = f"BoltMQ {send_path}"  # its rows set beside the default path's
        self.colocated = colocated
        """The broker serves its store in one process (``boltmq dev --colocate``)."""
        if colocated:
            self.durability += "; the broker serving its store in one process (no hop between)"

    def start(self, workdir: Path) -> None:
        allocator.keep_freed_memory()  # as `python -m bench` does for its own process
        with (workdir / "boltmq-dev.log").open("wb") as log:  # the child keeps its own copy
            self.proc = self._launch(workdir, log)
        self.registry = self._read_registry()

    def _launch(self, workdir: Path, log: BinaryIO) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "boltmq.cli",
                "dev",
                "--data-dir",
                str(workdir / "boltmq"),
                "--registry-port",
                "0",
                "--store-port",
                "0",
                "--broker-port",
                "0",
                "--ha-port",
                "0",
                "--no-console",  # nor an MQTT gateway: BoltMQ alone, on no fixed port
                "--mqtt-port",
                "-1",
                *(("--colocate",) if self.colocated else ()),
                *DEV_SETTINGS,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
        )

    def _read_registry(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            if select.select([self.proc.stdout], [], [], 0.2)[0]:
                line = self.proc.stdout.readline().decode()
                if line.startswith("registry"):
                    return line.split()[1]
        stop_process(self.proc)
        raise PeerFailed("boltmq dev did not print its registry address")

    def stop(self) -> None:
        code = stop_process(self.proc)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()  # the banner's pipe
        if code not in (0, None):
            raise PeerFailed(f"boltmq dev exited {code}")

    def create_topics(self, round_name: str, count: int) -> list[str]:
        topics = [f"{round_name}-{n}" for n in range(count)]
        producer = Producer(self.registry, "CMP_SETUP").start()
        try:
            for topic in topics:  # the broker auto-creates each topic on its first message
                producer.send(Message(topic=topic, body=b"warm-up"))
            self._await_routes(producer, topics)
            for topic in topics:  # one message per queue: its consume queue file exists
                for _ in producer.client.write_queues(topic):  # (sends rotate over queues)
                    producer.send(Message(topic=topic, body=b"warm-up"))
        finally:
            producer.shutdown()
        return topics

    @staticmethod
    def _await_routes(producer: Producer, topics: Sequence[str]) -> None:
        """Until the registry routes every topic (one GetRoutes call a try)."""
        deadline = time.monotonic() + ROUTE_WAIT_S
        while missing := producer.client.routes(topics):
            if time.monotonic() > deadline:
                raise PeerFailed(
                    f"the registry never learnt topic {missing[0]} (and {len(missing) - 1} more)"
                )
            time.sleep(0.2)

    def producer(self, topics: Sequence[str]) -> BoltMQProducer:
        return BoltMQProducer(self.registry, topics, self.send_path)

    def shared_producer(self, topics: Sequence[str]) -> BoltMQProducer:
        """A Producer is thread-safe; concurrent sends batch (natural batching)."""
        return BoltMQProducer(self.registry, topics, self.send_path)

    def consumer(self, topics: Sequence[str], from_start: bool) -> BoltMQConsumer:
        return BoltMQConsumer(self.registry, topics, from_start)
