"""MalformedRequests: a request whose bytes do not parse gets INVALID_ARGUMENT.

grpc's aio server deserializes a request before any handler runs; bytes that
are not the request message make it log a traceback and answer UNKNOWN, the
status of a server bug. This interceptor, installed on every server by
:func:`boltmq.kernel.runtime.create_server`, wraps the deserializer of each handler
with a unary request so a DecodeError becomes a marker, and the handler
answers it with INVALID_ARGUMENT naming the parse error instead.

Handlers with a streaming request (client or bidi streams: HA replication,
reflection) are left as they are: their messages are parsed one by one inside
the stream, where grpc already ends the call on a bad one. The rejected
alternative, patching each servicer, would repeat the check in every method.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError


class MalformedRequest:
    """What the wrapped deserializer returns for bytes that do not parse."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(raw: bytes) -> Any:
        try:
            return deserialize(raw)
        except DecodeError as exc:
            return MalformedRequest(f"malformed request: {exc}")

    return parse


async def _refuse(request: MalformedRequest, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


def _unary(behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, MalformedRequest):
            await _refuse(request, context)
        return await behavior(request, context)

    return handle


def _server_stream(
    behavior: Callable[..., AsyncIterator[Any]],
) -> Callable[..., AsyncIterator[Any]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, MalformedRequest):
            await _refuse(request, context)
        async for item in behavior(request, context):
            yield item

    return handle


class MalformedRequests(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc has no type information: its classes are Any
    """Answer unparseable unary requests with INVALID_ARGUMENT (see the module docstring)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        parse = _tolerant(handler.request_deserializer)
        if handler.unary_unary is not None and inspect.iscoroutinefunction(handler.unary_unary):
            return grpc.unary_unary_rpc_method_handler(
                _unary(handler.unary_unary),
                request_deserializer=parse,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
            return grpc.unary_stream_rpc_method_handler(
                _server_stream(handler.unary_stream),
                request_deserializer=parse,
                response_serializer=handler.response_serializer,
            )
        return handler
