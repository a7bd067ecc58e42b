"""EndingHealthServicer on a real gRPC server on loopback: watches end at shutdown.

A watch of a known service reads NOT_SERVING and then the end of its stream (OK); a
watch of a service the server does not know is ended too, without waiting for a word
it will never get; a client that leaves first is not mistaken for an ended watch.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from boltmq.kernel.health_watches import EndingHealthServicer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


async def _watch(stub: health_pb2_grpc.HealthStub, service: str) -> tuple[list[int], object]:
    """The statuses a watch reads and how its stream ended (a code, or the error)."""
    call = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=30)
    statuses: list[int] = []
    try:
        async for answer in call:
            statuses.append(answer.status)
        return statuses, await call.code()
    except grpc.aio.AioRpcError as exc:
        return statuses, exc.code()


async def _scenario() -> tuple[tuple[list[int], object], tuple[list[int], object], object]:
    server = grpc.aio.server()
    servicer = EndingHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await servicer.set("boltmq.v1.StoreService", SERVING)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)
    known = asyncio.ensure_future(_watch(stub, "boltmq.v1.StoreService"))
    unknown = asyncio.ensure_future(_watch(stub, "no.such.Service"))
    leaving = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
    await leaving.read()  # its first word, then the client goes away
    leaving.cancel()
    wanted = {"boltmq.v1.StoreService", "no.such.Service"}
    while {w.service for w in servicer._watches} != wanted:  # the leaver gone, the others open
        await asyncio.sleep(0.01)
    await servicer.enter_graceful_shutdown()
    await servicer.end_watches()
    results = await asyncio.gather(known, unknown)
    await server.stop(None)
    await channel.close()
    return results[0], results[1], leaving.cancelled()


def test_watches_end_after_not_serving_and_unknown_services_end_too() -> None:
    known, unknown, left = asyncio.run(_scenario())
    assert known == ([SERVING, NOT_SERVING], grpc.StatusCode.OK)
    assert unknown == ([UNKNOWN], grpc.StatusCode.OK)
    assert left
