"""RabbitMQ in the comparison: Debian's ``rabbitmq-server`` with aio-pika, stream queues.

The node runs as a child process with everything of its own in the round's
temporary directory: node name, Erlang cookie (``HOME``), Mnesia and stream
data, logs, a config file listening on a free loopback port, no plugins, and
its own ``epmd`` on a free loopback port (started and stopped here, so no
daemon outlives the run). Stopping is SIGTERM (the Erlang VM shuts the node
down cleanly).

One topic is one durable stream queue (``x-queue-type: stream``), the
RabbitMQ queue type that keeps messages for several consumers and lets a new
one start at the first message, as the other systems' groups do. Producing is
a persistent publish to the default exchange on a channel with publisher
confirms, waiting for the broker's confirm; a batch publishes every message,
then waits for all the confirms (they are pipelined on one channel). Consuming
is ``basic.consume`` on each stream of the round with ``x-stream-offset``
``first`` (or ``next``), a prefetch of ``PREFETCH`` per consumer, and one
``basic.ack`` with ``multiple`` per poll. Durability: a stream confirms once
its writer has appended the message to the segment file, without an fsync per
message (a single node; streams rely on replication for safety).

aio-pika is asyncio only: as with nats-py, each client runs its own event loop
in the thread that uses it; the client many sender threads share runs its loop
in a thread of its own, and each thread's publish is a coroutine handed to it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.compare.peer import (
    PeerFailed,
    client_library,
    require_binary,
    stop_process,
    wait_for_port,
)

PREFETCH = 1024
POLL_WAIT_S = 0.1
SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
"""Debian's ``/usr/sbin/rabbitmq-server`` re-runs itself as the ``rabbitmq`` user with
the system's directories; the script it wraps takes the environment set here."""
NODE_START_TIMEOUT_S = 90.0


def _pika() -> Any:
    return client_library("aio_pika", "aio-pika")


async def _open(url: str) -> tuple[Any, Any]:
    """A connection and a channel with publisher confirms (made inside the loop)."""
    connection = await _pika().connect(url)
    channel = await connection.channel(publisher_confirms=True)
    return connection, channel


class _Loop:
    """A private event loop, one connection and one confirming channel."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.connection, self.channel = self.run(_open(url))

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.run(self.connection.close())
        self.loop.close()


def _message(body: bytes) -> Any:
    pika = _pika()
    return pika.Message(body, delivery_mode=pika.DeliveryMode.PERSISTENT)


async def _publish(channel: Any, topic: str, bodies: Sequence[bytes]) -> int:
    """Publish ``bodies`` and wait for every confirm; how many the broker acked."""
    exchange = channel.default_exchange
    confirms = await asyncio.gather(*(exchange.publish(_message(b), topic) for b in bodies))
    ack = client_library("pamqp.commands", "aio-pika").Basic.Ack
    return sum(1 for c in confirms if isinstance(c, ack))


class RabbitProducer(_Loop):
    """Confirmed publishes on one channel."""

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        count: int = self.run(_publish(self.channel, topic, bodies))
        return count

    def send_one(self, topic: str, body: bytes) -> int:
        count: int = self.run(_publish(self.channel, topic, [body]))
        return count

    close = _Loop.close


class RabbitSharedProducer:
    """Confirmed publishes of many threads on one channel, its loop in its own thread."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.connection, self.channel = self._run(_open(url))

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        count: int = self._run(_publish(self.channel, topic, bodies))
        return count

    def send_one(self, topic: str, body: bytes) -> int:
        count: int = self._run(_publish(self.channel, topic, [body]))
        return count

    def close(self) -> None:
        self._run(self.connection.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def _event() -> asyncio.Event:
    return asyncio.Event()


class RabbitConsumer(_Loop):
    """One consumer per stream of the round on one channel, from ``first`` or ``next``."""

    def __init__(self, url: str, topics: Sequence[str], from_start: bool) -> None:
        super().__init__(url)
        self.received: list[Any] = []
        self.arrived = self.run(_event())
        self.run(self._subscribe(topics, "first" if from_start else "next"))

    async def _subscribe(self, topics: Sequence[str], offset: str) -> None:
        await self.channel.set_qos(prefetch_count=PREFETCH)
        for topic in topics:
            queue = await self.channel.get_queue(topic, ensure=False)
            await queue.consume(self._deliver, arguments={"x-stream-offset": offset})

    async def _deliver(self, message: Any) -> None:
        self.received.append(message)
        self.arrived.set()

    async def _wait(self) -> None:
        try:
            async with asyncio.timeout(POLL_WAIT_S):
                await self.arrived.wait()
        except TimeoutError:
            pass

    def poll(self) -> list[bytes]:
        if not self.received:
            self.run(self._wait())
        taken, self.received = self.received, []
        self.arrived.clear()
        if taken:
            self.run(taken[-1].ack(multiple=True))
        return [m.body for m in taken]


def _free_ports(count: int) -> list[int]:
    """``count`` different ports nothing listens on now (held together while picked)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class RabbitMQPeer:
    """``rabbitmq-server`` (and its ``epmd``) as child processes."""

    name = "RabbitMQ"
    durability = (
        "stream queues, persistent messages, publisher confirms (confirmed once appended "
        "to the stream's segment file, no fsync per message)"
    )
    topic_unit = "stream queue"

    def __init__(self, install: bool = False) -> None:
        self.install = install
        self.server: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, workdir: Path) -> None:
        require_binary("rabbitmq-server", "rabbitmq-server", self.install)
        _pika()
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        data = workdir / "rabbitmq"
        data.mkdir(parents=True, exist_ok=True)
        port, dist_port, epmd_port = _free_ports(3)
        env = self._environment(data, port, dist_port, epmd_port)
        log = data / "log" / "node.log"
        self.epmd = subprocess.Popen(
            [epmd, "-port", str(epmd_port), "-address", "127.0.0.1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.epmd, epmd_port, log)
        with (data / "console.log").open("wb") as console:
            self.server = subprocess.Popen(
                [str(SERVER_SCRIPT)],
                env=env,
                stdout=console,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            wait_for_port(self.server, port, data / "console.log", NODE_START_TIMEOUT_S)
        except PeerFailed:
            stop_process(self.epmd)
            raise
        self.url = f"amqp://guest:guest@127.0.0.1:{port}/"

    @staticmethod
    def _environment(data: Path, port: int, dist_port: int, epmd_port: int) -> dict[str, str]:
        (data / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{port}\n"
            "loopback_users.guest = true\n"
            "disk_free_limit.absolute = 50MB\n"
        )
        (data / "enabled_plugins").write_text("[].\n")
        (data / "rabbitmq-env.conf").write_text("")
        return {
            **os.environ,
            "HOME": str(data),
            "RABBITMQ_NODENAME": f"bench{port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CONFIG_FILE": str(data / "rabbitmq.conf"),
            "RABBITMQ_CONF_ENV_FILE": str(data / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(data / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(data / "mnesia"),
            "RABBITMQ_LOG_BASE": str(data / "log"),
            "RABBITMQ_PID_FILE": str(data / "rabbitmq.pid"),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_CRASH_DUMP": str(data / "erl_crash.dump"),
        }

    def stop(self) -> None:
        code = None
        if self.server is not None and self.server.poll() is None:
            # the whole session: the script's shell and the Erlang VM it runs
            os.killpg(self.server.pid, signal.SIGTERM)
        code = stop_process(self.server)
        stop_process(self.epmd)
        if code not in (0, None, -signal.SIGTERM):
            raise PeerFailed(f"rabbitmq-server exited {code}")

    def create_topics(self, round_name: str, count: int) -> list[str]:
        topics = [f"{round_name}-{n}" for n in range(count)]
        setup = _Loop(self.url)
        try:
            setup.run(self._declare(setup.channel, topics))
        finally:
            setup.close()
        return topics

    @staticmethod
    async def _declare(channel: Any, topics: Sequence[str]) -> None:
        for topic in topics:
            await channel.declare_queue(topic, durable=True, arguments={"x-queue-type": "stream"})
            await _publish(channel, topic, [b"warm-up"])

    def producer(self, topics: Sequence[str]) -> RabbitProducer:
        return RabbitProducer(self.url)

    def shared_producer(self, topics: Sequence[str]) -> RabbitSharedProducer:
        return RabbitSharedProducer(self.url)

    def consumer(self, topics: Sequence[str], from_start: bool) -> RabbitConsumer:
        return RabbitConsumer(self.url, topics, from_start)
