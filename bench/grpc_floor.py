"""The cost of one unary gRPC call in Python on this machine, with nothing of BoltMQ in it.

A blocking client calls the standard health service's ``Check`` (a few bytes
each way) on a server in another process, ``--calls`` times, one at a time,
against a threaded ``grpc.server`` and then an aio ``grpc.aio.server``. It
prints the round trip and the CPU each side spent per call (the server's
from ``/proc/<pid>/stat``, every thread). A BoltMQ synchronous send makes
two such calls in a row (client -> broker -> store), so this is the floor
under the synchronous send figures (bench/RESULTS.md).

The last line is the same round trip as one message each way on an open
bidi stream of the aio server (an echo of the request bytes), which is what
the broker's appends use (StoreService/AppendStream).

    .venv/bin/python -m bench.grpc_floor [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

WARM_UP_CALLS = 300


def serve_threaded() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    server.wait_for_termination()


STREAM_METHOD = "/floor.Echo/Stream"


async def _echo(requests: Any, context: grpc.aio.ServicerContext) -> Any:
    async for request in requests:
        yield request


async def serve_aio() -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "floor.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(_echo)}
            ),
        )
    )
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stream_round_trip(channel: grpc.Channel, method: str) -> Callable[[bytes], bytes]:
    """``send(request)``: one message out on one open bidi stream of ``method`` and the
    answer back, as bytes both ways (bench/relay_floor.py's ``--call stream`` too)."""
    outgoing: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    replies = channel.stream_stream(method)(iter(outgoing.get, None))

    def send(request: bytes) -> bytes:
        outgoing.put(request)
        return next(replies)

    return send


def measure(kind: str, calls: int, stream: bool = False) -> str:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            if stream:
                send = stream_round_trip(channel, STREAM_METHOD)

                def check(request: Any) -> Any:
                    return send(request.SerializeToString())
            else:
                check = health_pb2_grpc.HealthStub(channel).Check
            request = health_pb2.HealthCheckRequest()
            for _ in range(WARM_UP_CALLS):
                check(request)
            server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
            start = time.perf_counter()
            for _ in range(calls):
                check(request)
            elapsed = time.perf_counter() - start
            client_cpu = time.process_time() - client_cpu
            server_cpu = cpu_seconds(server.pid) - server_cpu
    finally:
        server.kill()
        server.wait()
    if stream:
        kind = f"{kind}, bidi stream"
    return (
        f"{kind:<8} {calls} calls: round trip {elapsed / calls * 1e6:5.0f} us, "
        f"client CPU {client_cpu / calls * 1e6:4.0f} us, "
        f"server CPU {server_cpu / calls * 1e6:4.0f} us per call"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--serve", choices=("threaded", "aio"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    if args.serve == "threaded":
        serve_threaded()
    elif args.serve == "aio":
        asyncio.run(serve_aio())
    else:
        for kind in ("threaded", "aio"):
            print(measure(kind, args.calls), flush=True)
        print(measure("aio", args.calls, stream=True), flush=True)


if __name__ == "__main__":
    main()
