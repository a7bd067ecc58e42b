"""``python -m bench.mqtt_compare``: the MQTT gateway beside Debian's mosquitto, one run.

Starts a registry, a store and a broker (ports 0, a temporary directory), the MQTT
gateway in front of them, and ``mosquitto`` (apt ``mosquitto``, ``make mosquitto``) on a
loopback port, then measures each the same way with one asyncio client process
speaking MQTT 5 (packets by the ``mqtt5`` library):

- **idle connections**: ``--connections`` devices connect (``--parallel`` at a time)
  and stay; the connect rate, then the server's resident memory and CPU time per
  connection (psutil: RSS after minus before, CPU seconds spent connecting), and its
  CPU while they sit idle for ``IDLE_S``;
- **publish throughput**: one device publishes ``--messages`` of ``--size`` bytes to
  one topic, one subscriber reads them: QoS 0 (as fast as the socket takes them; the
  rate is what the subscriber got, and how many) and QoS 1 (a window of the server's
  Receive Maximum PUBACKs in flight);
- **fan-out latency**: ``--fanout`` subscribers of one topic; ``ROUNDS`` messages, one
  at a time, each stamped with its send time: p50 and p99 from the send to each
  subscriber's receipt.

The fd limit is raised to the hard limit first (``resource.setrlimit``); the servers
inherit it. Short by default (a few seconds each); figures and the commands that made
them are in bench/RESULTS.md. It prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import mqtt5
import psutil

from boltmq.cli.dev.launcher import ServiceProcess

IDLE_S = 3.0
ROUNDS = 5
WAIT_S = 60.0
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
STORE_SETTINGS = (
    "mapped_file_size_commitlog=268435456",
    # a shared disk may be nearly full before the run writes a byte: no watermarks
    "disk_max_used_space_ratio=100",
    "disk_space_clean_forcibly_ratio=100",
    "disk_space_warning_level_ratio=100",
)


class Device:
    """One MQTT 5 connection, packets read by a task into ``on_packet``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buffer = bytearray()
        self.on_packet: Callable[[mqtt5.Packet], None] = lambda packet: None
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, port: int, client_id: str) -> tuple[Device, mqtt5.ConnAckPacket]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        device = cls(reader, writer)
        writer.write(mqtt5.ConnectPacket(client_id, clean_start=True).write())
        connack = await device.packet()
        assert isinstance(connack, mqtt5.ConnAckPacket), connack
        return device, connack

    async def packet(self) -> mqtt5.Packet:
        while True:
            if self.buffer:
                try:
                    with memoryview(self.buffer) as view:
                        packet, size = mqtt5.read(view)
                except IndexError:
                    pass
                else:
                    del self.buffer[:size]
                    return packet
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("closed")
            self.buffer += data

    def listen(self, on_packet: Callable[[mqtt5.Packet], None]) -> None:
        self.on_packet = on_packet

        async def loop() -> None:
            try:
                while True:
                    self.on_packet(await self.packet())
            except (ConnectionError, asyncio.CancelledError):
                pass

        self.task = asyncio.create_task(loop())

    async def subscribe(self, topic: str, qos: int) -> None:
        self.writer.write(
            mqtt5.SubscribePacket(1, [mqtt5.TopicFilter(topic, max_qos=mqtt5.QoS(qos))]).write()
        )
        suback = await self.packet()
        assert isinstance(suback, mqtt5.SubAckPacket) and int(suback.reason_codes[0]) < 0x80

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.writer.close()


class Target:
    """A server under test: its port and its process (for memory and CPU)."""

    def __init__(self, name: str, port: int, pid: int) -> None:
        self.name, self.port = name, port
        self.process = psutil.Process(pid)

    def rss_mib(self) -> float:
        return self.process.memory_info().rss / 2**20

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system


async def idle_connections(target: Target, count: int, parallel: int) -> dict[str, float]:
    rss, cpu = target.rss_mib(), target.cpu_s()
    devices: list[Device] = []
    gate = asyncio.Semaphore(parallel)

    async def one(n: int) -> None:
        async with gate:
            device, _ = await Device.connect(target.port, f"idle-{n}")
            devices.append(device)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(count)))
    elapsed = time.perf_counter() - started
    connect_cpu = target.cpu_s() - cpu
    await asyncio.sleep(0.5)
    held_rss = target.rss_mib()
    idle_cpu = target.cpu_s()
    await asyncio.sleep(IDLE_S)
    idle_percent = (target.cpu_s() - idle_cpu) / IDLE_S * 100
    for device in devices:
        device.close()
    await asyncio.sleep(0.5)
    return {
        "connections": len(devices),
        "connect_per_s": count / elapsed,
        "rss_mib": held_rss,
        "kib_per_connection": (held_rss - rss) * 1024 / count,
        "cpu_ms_per_connect": connect_cpu * 1000 / count,
        "idle_cpu_percent": idle_percent,
    }


async def throughput(target: Target, messages: int, size: int, qos: int) -> dict[str, float]:
    topic = f"bench/tp{qos}"
    subscriber, _ = await Device.connect(target.port, f"tp-sub-{qos}")
    await subscriber.subscribe(topic, qos)
    publisher, connack = await Device.connect(target.port, f"tp-pub-{qos}")
    got = 0
    done = asyncio.Event()
    await _warm(publisher, subscriber, topic)

    def on_message(packet: mqtt5.Packet) -> None:
        nonlocal got
        if isinstance(packet, mqtt5.PublishPacket):
            if packet.packet_id is not None:
                subscriber.writer.write(mqtt5.PubAckPacket(packet.packet_id).write())
            if packet.payload == b"warm":
                return
            got += 1
            if got >= messages:
                done.set()

    subscriber.listen(on_message)
    payload = b"m" * size
    started = time.perf_counter()
    if qos == 0:
        data = mqtt5.PublishPacket(topic, payload).write()
        for _ in range(messages):
            publisher.writer.write(data)
            await publisher.writer.drain()
    else:
        window = asyncio.Semaphore(min(connack.receive_max, 1000))
        acked = asyncio.Event()
        count = 0

        def on_ack(packet: mqtt5.Packet) -> None:
            nonlocal count
            if isinstance(packet, mqtt5.PubAckPacket):
                window.release()
                count += 1
                if count >= messages:
                    acked.set()

        publisher.listen(on_ack)
        for n in range(messages):
            await window.acquire()
            packet_id = n % 65535 + 1
            publisher.writer.write(
                mqtt5.PublishPacket(
                    topic, payload, qos=mqtt5.QoS.AT_LEAST_ONCE, packet_id=packet_id
                ).write()
            )
        async with asyncio.timeout(WAIT_S):
            await acked.wait()
    sent = time.perf_counter() - started
    try:
        async with asyncio.timeout(10 if qos == 0 else WAIT_S):
            await done.wait()
    except TimeoutError:
        pass  # QoS 0 may be dropped: report what arrived
    elapsed = time.perf_counter() - started
    publisher.close()
    subscriber.close()
    return {"sent_per_s": messages / sent, "received": got, "received_per_s": got / elapsed}


async def _warm(publisher: Device, subscriber: Device, topic: str) -> None:
    """Publish until the subscriber gets one (the gateway's topic may not exist yet)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        publisher.writer.write(mqtt5.PublishPacket(topic, b"warm").write())
        try:
            async with asyncio.timeout(1.0):
                packet = await subscriber.packet()
        except TimeoutError:
            continue
        if isinstance(packet, mqtt5.PublishPacket):
            return  # later warm-ups are not counted
    raise TimeoutError("the subscriber never got a message")


async def fanout(target: Target, subscribers: int, parallel: int) -> dict[str, float]:
    topic = "bench/fan"
    gate = asyncio.Semaphore(parallel)
    devices: list[Device] = []

    async def one(n: int) -> None:
        async with gate:
            device, _ = await Device.connect(target.port, f"fan-{n}")
            await device.subscribe(topic, 0)
            devices.append(device)

    await asyncio.gather(*(one(n) for n in range(subscribers)))
    publisher, _ = await Device.connect(target.port, "fan-pub")
    await _warm(publisher, devices[0], topic)
    latencies: list[float] = []
    for round_no in range(ROUNDS + 1):
        arrived = 0
        done = asyncio.Event()

        def on_message(
            packet: mqtt5.Packet, round_no: int = round_no, done: asyncio.Event = done
        ) -> None:
            nonlocal arrived
            if isinstance(packet, mqtt5.PublishPacket) and packet.payload.startswith(b"t"):
                if round_no:  # round 0 settles every subscriber
                    latencies.append(time.perf_counter() - float(packet.payload[1:]))
                arrived += 1
                if arrived >= subscribers:
                    done.set()

        for device in devices:
            device.listen(on_message)
        payload = f"t{time.perf_counter()!r}".encode()
        publisher.writer.write(mqtt5.PublishPacket(topic, payload).write())
        try:
            async with asyncio.timeout(WAIT_S):
                await done.wait()
        finally:
            for device in devices:
                if device.task is not None:
                    device.task.cancel()
    publisher.close()
    for device in devices:
        device.close()
    latencies.sort()
    return {
        "subscribers": subscribers,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def start_gateway(work: Path) -> tuple[list[ServiceProcess], Target]:
    logs = work / "logs"
    registry = ServiceProcess("registry", logs).start()
    store = ServiceProcess("store", logs, f"root_dir={work / 'store'}", *STORE_SETTINGS).start()
    broker = ServiceProcess(
        "broker", logs, f"store_address={store.address}", f"registry_addresses={registry.address}"
    ).start()
    gateway = ServiceProcess(
        "mqtt",
        logs,
        f"registry={registry.address}",
        "ws_listen_port=-1",
        "max_connections=1000000",
    ).start()
    assert gateway.proc is not None
    return [gateway, broker, store, registry], Target("boltmq-mqtt", gateway.port, gateway.proc.pid)


def start_mosquitto(work: Path) -> tuple[subprocess.Popen[bytes], Target]:
    port = _free_port()
    conf = work / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        "max_queued_messages 1000\nlog_dest none\n"
    )
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    return proc, Target("mosquitto", port, proc.pid)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def measure(target: Target, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    return {
        "idle": await idle_connections(target, args.connections, args.parallel),
        "qos0": await throughput(target, args.messages, args.size, 0),
        "qos1": await throughput(target, args.messages, args.size, 1),
        "fanout": await fanout(target, args.fanout, args.parallel),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--parallel", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--fanout", type=int, default=500)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"fd limit {soft} -> {hard}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        results = {}
        mosquitto, mosquitto_target = start_mosquitto(work)
        try:
            results["mosquitto"] = asyncio.run(measure(mosquitto_target, args))
        finally:
            mosquitto.terminate()
            mosquitto.wait()
        processes, gateway_target = start_gateway(work)
        try:
            results["boltmq-mqtt"] = asyncio.run(measure(gateway_target, args))
        finally:
            for proc in processes:
                proc.stop()
    for name, figures in results.items():
        for part, values in figures.items():
            text = ", ".join(f"{k} {v:,.2f}" for k, v in values.items())
            print(f"{name:12} {part:7} {text}")


if __name__ == "__main__":
    main()
