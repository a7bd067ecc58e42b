"""The broker's gate holds the RocketMQ 5 protocol's calls to the client limits.

That protocol authenticates in its own servicer, so the gate does not check signatures
for it; it still charges each call to the client's IP address, so a flood through it is
refused as one through BoltMQ's own service is. The test builds the gate with an
in-flight limit of one call and hands it the protocol's handlers, as gRPC's server would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from boltmq.kernel.caller_limits import CallerLimits
from services.broker.access.gate import BrokerGate


class Aborted(Exception):
    pass


class Context:
    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None

    def peer(self) -> str:
        return "ipv4:10.1.2.3:4567"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        raise Aborted(details)


class Details:
    def __init__(self, method: str) -> None:
        self.method = method


async def _through(gate: BrokerGate, method: str, handler: Any) -> Any:
    async def continuation(_details: Any) -> Any:
        return handler

    return await gate.intercept_service(continuation, Details(method))


def test_calls_past_the_in_flight_limit_are_refused_and_counted_back() -> None:
    async def scenario() -> list[Any]:
        release = asyncio.Event()

        async def send(request: Any, context: Any) -> str:
            await release.wait()
            return "sent"

        gate = BrokerGate(None, CallerLimits(0, 1, 1))  # one call in flight per client
        gated = await _through(
            gate,
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            grpc.unary_unary_rpc_method_handler(send),
        )
        first = asyncio.create_task(gated.unary_unary(b"", Context()))
        await asyncio.sleep(0)  # the first call is in flight
        second_context = Context()
        with pytest.raises(Aborted):
            await gated.unary_unary(b"", second_context)
        release.set()
        outcomes = [await first, second_context.code]
        outcomes.append(await gated.unary_unary(b"", Context()))  # the slot came back
        return outcomes

    assert asyncio.run(scenario()) == ["sent", grpc.StatusCode.RESOURCE_EXHAUSTED, "sent"]


def test_a_receive_stream_is_counted_and_telemetry_passes_untouched() -> None:
    async def scenario() -> tuple[list[Any], bool]:
        async def receive(request: Any, context: Any) -> Any:
            yield "message"

        async def telemetry(requests: Any, context: Any) -> Any:
            yield "settings"

        gate = BrokerGate(None, CallerLimits(0, 1, 1))
        gated = await _through(
            gate,
            "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
            grpc.unary_stream_rpc_method_handler(receive),
        )
        streamed = [item async for item in gated.unary_stream(b"", Context())]
        again = [item async for item in gated.unary_stream(b"", Context())]  # slot released
        bidi = grpc.stream_stream_rpc_method_handler(telemetry)
        untouched = await _through(gate, "/apache.rocketmq.v2.MessagingService/Telemetry", bidi)
        return streamed + again, untouched is bidi

    streamed, untouched = asyncio.run(scenario())
    assert streamed == ["message", "message"] and untouched


def test_without_limits_the_protocols_handlers_are_not_wrapped() -> None:
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    gate = BrokerGate(None, None)
    method = "/apache.rocketmq.v2.MessagingService/QueryRoute"
    assert asyncio.run(_through(gate, method, handler)) is handler
