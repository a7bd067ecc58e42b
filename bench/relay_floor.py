"""The fastest a batch can cross BoltMQ's two Python gRPC hops, with nothing of BoltMQ in it.

A BoltMQ batched send goes client -> broker (unary call) -> store (a message on
an open bidi stream, ``StoreService/AppendStream``) and back; a pull comes back
the same way. This script builds that path from bare parts and times it:

- ``sink``: an aio server whose bidi stream answers each request with
  ``--reply-bytes`` of zeros (the store's answer: offsets and statuses);
- ``relay``: an aio server whose unary ``Send`` forwards the request's bytes
  on one open stream to the sink and returns the sink's answer (the broker);
- the client: ``--producers`` threads, each with its own channel, calling
  ``Send`` with ``--batch`` bodies of ``--size`` bytes joined into one
  message, for ``--seconds`` (the bodies are built per call, as
  ``bench/compare`` builds them). ``--call stream`` sends each request as
  one message on an open bidi stream of the relay (``SendStream``) instead
  of a unary call each: the cheapest call Python gRPC has, so with
  ``--batch 1`` it is the floor under any one-at-a-time send, whatever the
  protocol.

Each process sets the allocator as BoltMQ's servers do
(:func:`boltmq.kernel.allocator.keep_freed_memory`). No protobuf, no checks, no
files: the bytes are passed as they are (identity serializers).
``--direction pull`` sends a small request and has the sink answer with the
batch instead (a consumer's pull). It prints msg/s, MB/s and
the per-call p50/p99, and the CPU seconds each process spent per message, so
the figures can be set beside ``python -m bench.compare`` (bench/RESULTS.md).

    .venv/bin/python -m bench.relay_floor [--producers 1] [--batch 256] [--direction push]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.grpc_floor import stream_round_trip
from bench.soak_report import percentile_ms
from boltmq.kernel import allocator

UNLIMITED = (("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1))
SEND_METHOD = "/floor.Relay/Send"
SEND_STREAM_METHOD = "/floor.Relay/SendStream"
STREAM_METHOD = "/floor.Sink/Stream"
WARM_UP_S = 1.0


def _bytes(value: bytes) -> bytes:
    return value


async def _serve(service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
    """An aio server of ``service`` on a free loopback port, printed, until killed."""
    server = grpc.aio.server(options=UNLIMITED)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()


async def serve_sink(reply_bytes: int) -> None:
    reply = bytes(reply_bytes)

    async def stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        async for request in requests:
            yield reply if len(request) > 64 else bytes(int.from_bytes(request, "big"))

    await _serve(
        "floor.Sink", {"Stream": grpc.stream_stream_rpc_method_handler(stream, _bytes, _bytes)}
    )


async def serve_relay(sink_port: int) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{sink_port}", options=UNLIMITED)
    call = channel.stream_stream(STREAM_METHOD, _bytes, _bytes)()
    waiting: collections.deque[asyncio.Future[bytes]] = collections.deque()
    writing = asyncio.Lock()  # one write at a time on a stream; answers come in order

    async def read_answers() -> None:
        async for answer in call:
            waiting.popleft().set_result(answer)

    reader = asyncio.get_running_loop().create_task(read_answers())

    async def send(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        async with writing:
            waiting.append(answer)
            await call.write(request)
        return await answer

    async def send_stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        async for request in requests:
            yield await send(request, context)

    try:
        await _serve(
            "floor.Relay",
            {
                "Send": grpc.unary_unary_rpc_method_handler(send, _bytes, _bytes),
                "SendStream": grpc.stream_stream_rpc_method_handler(send_stream, _bytes, _bytes),
            },
        )
    finally:
        reader.cancel()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (every thread)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _start(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.relay_floor", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],  # the checkout: `bench` is not installed
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


@dataclass(frozen=True)
class Floor:
    """What one run of the bare path measured."""

    direction: str
    call: str
    producers: int
    batch: int
    size: int
    messages: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_us: tuple[float, float, float]
    """CPU microseconds a message of the relay, the sink and the client."""

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    def text(self) -> str:
        """The one line ``python -m bench.relay_floor`` prints."""
        relay, sink, client = self.cpu_us
        return (
            f"{self.direction} batch {self.batch} x {self.size} B, {self.producers} "
            f"producer(s), {self.call} calls: {self.msgs_per_s:,.0f} msg/s, "
            f"{self.msgs_per_s * self.size / 1e6:.1f} MB/s, p50 {self.p50_ms:.3f} ms, "
            f"p99 {self.p99_ms:.3f} ms per call; CPU per message: relay {relay:.1f} us, "
            f"sink {sink:.1f} us, client {client:.1f} us"
        )


def measure(
    *,
    producers: int = 1,
    batch: int = 256,
    size: int = 1024,
    seconds: float = 5.0,
    reply_bytes: int = 4096,
    direction: str = "push",
    call: str = "unary",
) -> Floor:
    """Start the sink and the relay, drive them for ``seconds`` after a warm-up, stop them."""
    push = direction == "push"
    batch_bytes = batch * size
    sink, sink_port = _start(
        "--serve", "sink", "--reply-bytes", str(reply_bytes if push else batch_bytes)
    )
    relay, relay_port = _start("--serve", "relay", "--sink-port", str(sink_port))
    try:
        counts = [0] * producers
        samples: list[list[int]] = [[] for _ in range(producers)]
        stop_at = [0.0]

        def worker(n: int) -> None:
            with grpc.insecure_channel(f"127.0.0.1:{relay_port}", options=UNLIMITED) as channel:
                send = (
                    stream_round_trip(channel, SEND_STREAM_METHOD)
                    if call == "stream"
                    else channel.unary_unary(SEND_METHOD, _bytes, _bytes)
                )
                pull = batch_bytes.to_bytes(8, "big")
                while not stop_at[0] or time.monotonic() < stop_at[0]:
                    t0 = time.perf_counter_ns()
                    if push:
                        request = b"".join(
                            time.perf_counter_ns().to_bytes(8, "big") + b"x" * (size - 8)
                            for _ in range(batch)
                        )
                        send(request)
                    else:
                        answer = send(pull)
                        bodies = [answer[i : i + size] for i in range(0, len(answer), size)]
                        assert len(bodies) == batch
                    if stop_at[0]:
                        samples[n].append(time.perf_counter_ns() - t0)
                        counts[n] += batch

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(producers)]
        for t in threads:
            t.start()
        time.sleep(WARM_UP_S)
        cpu0 = (cpu_seconds(relay.pid), cpu_seconds(sink.pid), time.process_time())
        start = time.perf_counter()
        stop_at[0] = time.monotonic() + seconds
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        cpu1 = (cpu_seconds(relay.pid), cpu_seconds(sink.pid), time.process_time())
    finally:
        for proc in (relay, sink):
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    messages = sum(counts)
    lat = [s for per in samples for s in per]
    p50, p99 = percentile_ms(lat, 0.5), percentile_ms(lat, 0.99)
    if not messages or p50 is None or p99 is None:
        raise RuntimeError(f"the bare path moved no message in {seconds:g} s")
    relay_us, sink_us, client_us = (
        (b - a) / messages * 1e6 for a, b in zip(cpu0, cpu1, strict=True)
    )
    return Floor(
        direction,
        call,
        producers,
        batch,
        size,
        messages,
        elapsed,
        p50,
        p99,
        (relay_us, sink_us, client_us),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reply-bytes", type=int, default=4096)
    parser.add_argument("--direction", choices=("push", "pull"), default="push")
    parser.add_argument(
        "--call",
        choices=("unary", "stream"),
        default="unary",
        help="client -> relay: a unary call a request (as the SDK), or one "
        "message a request on an open bidi stream",
    )
    parser.add_argument("--serve", choices=("sink", "relay"), help=argparse.SUPPRESS)
    parser.add_argument("--sink-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("producers", "batch", "seconds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive")
    if args.size < 8:
        parser.error("--size must be at least 8 (the send time)")
    if args.reply_bytes < 0:
        parser.error("--reply-bytes must not be negative")
    allocator.keep_freed_memory()  # as every BoltMQ server and benchmark process does
    if args.serve == "sink":
        asyncio.run(serve_sink(args.reply_bytes))
    elif args.serve == "relay":
        asyncio.run(serve_relay(args.sink_port))
    else:
        floor = measure(
            producers=args.producers,
            batch=args.batch,
            size=args.size,
            seconds=args.seconds,
            reply_bytes=args.reply_bytes,
            direction=args.direction,
            call=args.call,
        )
        print(floor.text(), flush=True)


if __name__ == "__main__":
    main()
