"""NATS JetStream in the comparison: ``nats-server -js`` (Debian) with nats-py.

One round is one stream with file storage; one topic is one subject of it
(``<round>.<n>``), which is how JetStream is meant to hold many topics (a
stream per topic would be 1,024 streams). Producing is a JetStream publish
waiting for its PubAck; a batch is ``publish_async`` of every message, then
waiting for all the acks. Consuming is a pull consumer over ``<round>.>``
fetching 1024 messages per call with ``AckPolicy.ALL`` (one ack per fetch,
like a committed offset). Durability: file storage with the server's default
syncing (no fsync per message). nats-py is asyncio only: each client runs its
own event loop in the thread that uses it; the client many sender threads
share runs its loop in a thread of its own, and each thread's publish is a
coroutine handed to it (one connection, publishes multiplexed on it).
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.compare.peer import (
    PeerFailed,
    client_library,
    free_port,
    require_binary,
    start_server,
    stop_process,
)

FETCH_MESSAGES = 1024
FETCH_WAIT_S = 0.1
MAX_ACK_PENDING = 1_000_000


def _nats() -> Any:
    client_library("nats.js.api", "nats-py")
    return client_library("nats", "nats-py")


class _Loop:
    """A private event loop and one connection, driven from a plain thread."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc = self.run(_nats().connect(url, max_reconnect_attempts=0))
        self.js = self.nc.jetstream()

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.close()


class NatsProducer(_Loop):
    """JetStream publishes on one connection."""

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        async def batch() -> int:
            futures = [await self.js.publish_async(topic, body) for body in bodies]
            acks = await asyncio.gather(*futures)
            return len(acks)

        count: int = self.run(batch())
        return count

    def send_one(self, topic: str, body: bytes) -> int:
        self.run(self.js.publish(topic, body))
        return 1

    close = _Loop.close


class NatsSharedProducer:
    """JetStream publishes of many threads on one connection, its loop in its own thread."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self._run(_nats().connect(url, max_reconnect_attempts=0))
        self.js = self.nc.jetstream()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        for body in bodies:
            self._run(self.js.publish(topic, body))
        return len(bodies)

    def send_one(self, topic: str, body: bytes) -> int:
        self._run(self.js.publish(topic, body))
        return 1

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class NatsConsumer(_Loop):
    """A pull consumer of a new durable over the round's subjects."""

    def __init__(self, url: str, stream: str, from_start: bool) -> None:
        super().__init__(url)
        api = _nats().js.api
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.ALL,
            max_ack_pending=MAX_ACK_PENDING,
            deliver_policy=api.DeliverPolicy.ALL if from_start else api.DeliverPolicy.NEW,
        )
        self.sub = self.run(
            self.js.pull_subscribe(
                f"{stream}.>", f"c{uuid.uuid4().hex[:8]}", stream=stream, config=config
            )
        )

    def poll(self) -> list[bytes]:
        try:
            messages = self.run(self.sub.fetch(FETCH_MESSAGES, timeout=FETCH_WAIT_S))
        except TimeoutError:  # nats.errors.TimeoutError, or asyncio's from fetch's deadline
            return []
        if messages:
            self.run(messages[-1].ack())
        return [m.data for m in messages]


class NatsPeer:
    """``nats-server -js`` as a child process."""

    name = "NATS JetStream"
    durability = "file storage, server default syncing (no fsync per message)"
    topic_unit = "subject of one stream"

    def __init__(self, install: bool = False) -> None:
        self.install = install
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.url = ""

    def start(self, workdir: Path) -> None:
        binary = require_binary("nats-server", "nats-server", self.install)
        _nats()
        data = workdir / "nats"
        data.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log = self.log = data / "nats.log"
        self.proc = start_server(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(data), "-l", str(log)],
            port,
            log,
        )
        self.url = f"nats://127.0.0.1:{port}"

    def stop(self) -> None:
        code = stop_process(self.proc)
        # nats-server exits 1 after a graceful SIGTERM shutdown; its log says so.
        graceful = self.log is not None and "Server Exiting" in self.log.read_text()
        if code not in (0, None) and not (code == 1 and graceful):
            raise PeerFailed(f"nats-server exited {code}")

    def create_topics(self, round_name: str, count: int) -> list[str]:
        topics = [f"{round_name}.{n}" for n in range(count)]
        setup = _Loop(self.url)
        try:
            api = _nats().js.api
            setup.run(
                setup.js.add_stream(
                    name=round_name, subjects=[f"{round_name}.>"], storage=api.StorageType.FILE
                )
            )
            for topic in topics:
                setup.run(setup.js.publish(topic, b"warm-up"))
        finally:
            setup.close()
        return topics

    def producer(self, topics: Sequence[str]) -> NatsProducer:
        return NatsProducer(self.url)

    def shared_producer(self, topics: Sequence[str]) -> NatsSharedProducer:
        return NatsSharedProducer(self.url)

    def consumer(self, topics: Sequence[str], from_start: bool) -> NatsConsumer:
        return NatsConsumer(self.url, topics[0].split(".")[0], from_start)
