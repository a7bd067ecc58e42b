"""MalformedRequests: a request whose bytes do not parse gets INVALID_ARGUMENT.

grpc's aio server deserializes a request before any handler runs; bytes that
are not the request message make it log a traceback and answer UNKNOWN, the
status of a server bug. This interceptor, installed on every server by
:func:`boltmq.kernel.runtime.create_server`, wraps the deserializer of each handler
with a unary request so a DecodeError becomes a marker, and the handler
answers it with INVALID_ARGUMENT naming the parse error instead.

Handlers with a streaming request (client or bidi streams: the store's
AppendStream, HA replication) get the same deserializer, and their request
iterator is wrapped: the first message that does not parse is raised where the
handler reads it as :class:`MalformedStreamMessage` (an InvalidArgument), and the
call ends INVALID_ARGUMENT once the handler let it out, where grpc alone would end
it UNKNOWN with a traceback. The call is not aborted from inside the iterator: a
handler may still be writing answers (AppendStream), and an abort then would
collide with the write and leave the call hanging. The rejected
alternative, patching each servicer, would repeat the check in every method.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from boltmq.kernel.errors import InvalidArgument


class MalformedRequest:
    """What the wrapped deserializer returns for bytes that do not parse."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserialize`` that returns a :class:`MalformedRequest` for bytes that do not parse
    (also for a client reading a stream from a peer it cannot trust: the HA follower)."""

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


class MalformedStreamMessage(InvalidArgument):
    """A message of a request stream did not parse (raised where the handler reads it)."""


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, MalformedRequest):
            raise MalformedStreamMessage(request.reason)
        yield request


def _client_stream(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """A streaming-request behavior (coroutine or async generator) over checked requests.

    The error reaches the handler where it reads; one that lets it out (its own
    clean-up done, its writes finished) has the call ended here. A handler in
    :func:`~boltmq.kernel.errors.answers_errors` ends it itself, as any InvalidArgument.
    """
    if inspect.isasyncgenfunction(behavior):

        async def stream(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for item in behavior(_checked(requests), context):
                    yield item
            except MalformedStreamMessage as exc:
                await context.abort(exc.code, str(exc))

        return stream

    async def handle(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(_checked(requests), context)
        except MalformedStreamMessage as exc:
            await context.abort(exc.code, str(exc))

    return handle


class MalformedRequests(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc has no type information: its classes are Any
    """Answer unparseable requests with INVALID_ARGUMENT (see the module docstring)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = tolerant(handler.request_deserializer)
        if handler.stream_unary is not None and inspect.iscoroutinefunction(handler.stream_unary):
            return grpc.stream_unary_rpc_method_handler(
                _client_stream(handler.stream_unary),
                request_deserializer=parse,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None and _async(handler.stream_stream):
            return grpc.stream_stream_rpc_method_handler(
                _client_stream(handler.stream_stream),
                request_deserializer=parse,
                response_serializer=handler.response_serializer,
            )
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


def _async(behavior: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)
