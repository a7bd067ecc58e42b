"""Redis Streams in the comparison: ``redis-server`` (Debian) with redis-py + hiredis.

One topic is one stream. Producing is XADD (a pipeline of XADDs without
MULTI for a batch); consuming is XREADGROUP over every stream of the round
with one consumer group, acknowledged with one XACK per stream and read.
Durability: ``appendonly yes``, ``appendfsync everysec`` (the AOF is written
before the reply and fsynced once a second), no RDB snapshots.
"""

from __future__ import annotations

import subprocess
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

READ_MESSAGES = 1024
"""Messages one XREADGROUP asks for in all (split between the streams)."""
BLOCK_MS = 100


def _redis() -> Any:
    return client_library("redis", "redis-py")


class RedisProducer:
    """One redis-py connection."""

    def __init__(self, port: int) -> None:
        self.client = _redis().Redis(port=port)

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        pipe = self.client.pipeline(transaction=False)
        for body in bodies:
            pipe.xadd(topic, {"b": body})
        return sum(1 for reply in pipe.execute() if reply)

    def send_one(self, topic: str, body: bytes) -> int:
        return 1 if self.client.xadd(topic, {"b": body}) else 0

    def close(self) -> None:
        self.client.close()


class RedisConsumer:
    """XREADGROUP over every stream of the round, XACK of what was read."""

    def __init__(self, port: int, topics: Sequence[str], from_start: bool) -> None:
        self.client = _redis().Redis(port=port)
        self.group = f"g-{uuid.uuid4().hex[:8]}"
        pipe = self.client.pipeline(transaction=False)
        for topic in topics:
            pipe.xgroup_create(topic, self.group, id="0" if from_start else "$", mkstream=True)
        pipe.execute()
        self.streams = dict.fromkeys(topics, ">")
        self.count = max(1, READ_MESSAGES // len(topics))

    def poll(self) -> list[bytes]:
        replies = self.client.xreadgroup(
            self.group, "c", self.streams, count=self.count, block=BLOCK_MS
        )
        bodies: list[bytes] = []
        if not replies:
            return bodies
        pipe = self.client.pipeline(transaction=False)
        for stream, entries in replies:
            bodies += [fields[b"b"] for _, fields in entries]
            pipe.xack(stream, self.group, *[entry_id for entry_id, _ in entries])
        pipe.execute()
        return bodies

    def close(self) -> None:
        self.client.close()


class RedisPeer:
    """``redis-server`` as a child process."""

    name = "Redis Streams"
    durability = "appendonly yes, appendfsync everysec (AOF written before the reply)"
    topic_unit = "stream"

    def __init__(self, install: bool = False) -> None:
        self.install = install
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, workdir: Path) -> None:
        binary = require_binary("redis-server", "redis-server", self.install)
        _redis()
        data = workdir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = data / "redis.log"
        self.proc = start_server(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(data),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--logfile",
                str(log),
                "--daemonize",
                "no",
            ],
            self.port,
            log,
        )

    def stop(self) -> None:
        code = stop_process(self.proc)
        if code not in (0, None):
            raise PeerFailed(f"redis-server exited {code}")

    def create_topics(self, round_name: str, count: int) -> list[str]:
        topics = [f"{round_name}-{n}" for n in range(count)]
        producer = RedisProducer(self.port)
        try:
            for topic in topics:
                producer.send_one(topic, b"warm-up")
        finally:
            producer.close()
        return topics

    def producer(self, topics: Sequence[str]) -> RedisProducer:
        return RedisProducer(self.port)

    def shared_producer(self, topics: Sequence[str]) -> RedisProducer:
        """redis-py's client is thread-safe: each thread's XADD takes a pooled connection."""
        return RedisProducer(self.port)

    def consumer(self, topics: Sequence[str], from_start: bool) -> RedisConsumer:
        return RedisConsumer(self.port, topics, from_start)
