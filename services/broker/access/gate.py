"""BrokerGate: the server interceptor in front of every BrokerService call.

In order, for each call: authenticate (when access control is on), take the
client's rate and in-flight budget
(:class:`~boltmq.kernel.caller_limits.CallerLimits`), authorize the request
against the ACL, run the call, give the in-flight slot back. The
authenticated caller is left in the call's context for the rights a handler
can only check on what it reads, and the client the call is charged to (its
access key, else its IP address) for the auto-creation limits
(:mod:`services.broker.access.caller`).
Authentication comes first so the budget is keyed by an access key nobody
can forge; authorization after the budget, because it reads the request and
a flood should cost as little as possible.

With access control on, the gate takes each request as the bytes received
(the handler's deserializer is set aside): the signature covers their SHA-256
(:mod:`boltmq.kernel.signing`), one digest per call, and the request is parsed
only once its signature is good. A request that does not parse is refused
INVALID_ARGUMENT.

Refusals are logged (method, peer, access key, reason; never a secret or a
signature) and answered UNAUTHENTICATED, PERMISSION_DENIED or
RESOURCE_EXHAUSTED. The RocketMQ 5 protocol's calls (``apache.rocketmq.v2``), which
authenticate in their own servicer, take the client limits only, keyed by IP address.
Health, reflection and other services pass untouched.

A bidi stream of sends (``SendStream``, the only one served) is admitted once,
as a call whose body is empty, and holds one in-flight slot while open; its
handler checks each message through the
:class:`~services.broker.access.stream_access.StreamAccess` the gate leaves it
(signature, rights and budget per message). Any other client-streaming call is
refused UNIMPLEMENTED.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from boltmq.kernel.caller_limits import CallerLimits, peer_host
from boltmq.kernel.signing import EMPTY_BODY, SignedCall
from services.broker.access.authorizer import AccessDenied, Authorizer
from services.broker.access.caller import Caller, reset_client_key, set_caller, set_client_key
from services.broker.access.resources import BROKER_SERVICE_PREFIX
from services.broker.access.stream_access import StreamAccess, set_stream_access

log = logging.getLogger(__name__)

ROCKETMQ_SERVICE_PREFIX = "/apache.rocketmq.v2.MessagingService/"
"""The RocketMQ 5 protocol the broker also serves: the client limits apply to it."""

STREAMED_METHODS = frozenset({f"{BROKER_SERVICE_PREFIX}SendStream"})
"""Bidi streams the gate serves: their handlers check each message (StreamAccess)."""
Parser = Callable[[bytes], Any] | None
"""A handler's request deserializer, when the gate parses requests itself."""
__all__ = ["BrokerGate", "peer_host"]


def _parsed(parse: Parser, request: Any) -> Any:
    """``request`` parsed by ``parse`` (None: already parsed); AccessDenied when it does not
    parse."""
    if parse is None:
        return request
    try:
        return parse(request)
    except Exception as exc:  # protobuf's DecodeError, or whatever a deserializer raises
        raise AccessDenied(
            grpc.StatusCode.INVALID_ARGUMENT, f"request does not parse: {type(exc).__name__}"
        ) from None


class BrokerGate(grpc.aio.ServerInterceptor):
    """Access control and client limits around the broker's handlers."""

    def __init__(self, authorizer: Authorizer | None, limits: CallerLimits | None) -> None:
        self._authorizer = authorizer
        self._limits = limits
        self._reports = limits if limits is not None else CallerLimits(0, 1, 0)
        """Remembers when each client's flood was last logged (limits off: nothing else)."""

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is not None and method.startswith(ROCKETMQ_SERVICE_PREFIX):
            return self._limited(method, handler)
        if handler is None or not method.startswith(BROKER_SERVICE_PREFIX):
            return handler
        parse = handler.request_deserializer if self._authorizer is not None else None
        # Signed calls: the raw bytes reach _admit, which digests them, then parses them.
        deserializer = None if parse is not None else handler.request_deserializer
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary, parse),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream, parse),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None and method in STREAMED_METHODS:
            return grpc.stream_stream_rpc_method_handler(
                self._bidi(method, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return _refused(method, handler)

    def _limited(self, method: str, handler: Any) -> Any:
        """A RocketMQ 5 protocol handler under the client limits alone (that protocol
        authenticates in its servicer, :mod:`services.broker.rocketmq_v2.credentials`):
        the client is its IP address. Telemetry, a stream for the client's lifetime, is
        not counted."""
        if self._limits is None or (handler.unary_unary is None and handler.unary_stream is None):
            return handler

        async def admit(context: grpc.aio.ServicerContext) -> str:
            key = peer_host(context.peer())
            why = self._limits.acquire(key) if self._limits is not None else ""
            if why:
                if self._should_log(grpc.StatusCode.RESOURCE_EXHAUSTED, key):
                    log.warning("refused %s from %s: RESOURCE_EXHAUSTED: %s", method, key, why)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{key}: {why}")
            return key

        if handler.unary_unary is not None:
            inner_unary = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                key = await admit(context)
                try:
                    return await inner_unary(request, context)
                finally:
                    self._release(key)

            return grpc.unary_unary_rpc_method_handler(
                unary, handler.request_deserializer, handler.response_serializer
            )
        inner_stream = handler.unary_stream

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            key = await admit(context)
            try:
                async for item in inner_stream(request, context):
                    yield item
            finally:
                self._release(key)

        return grpc.unary_stream_rpc_method_handler(
            stream, handler.request_deserializer, handler.response_serializer
        )

    def _unary(
        self, method: str, inner: Callable[..., Awaitable[Any]], parse: Parser
    ) -> Callable[..., Awaitable[Any]]:
        async def gated(request: Any, context: grpc.aio.ServicerContext) -> Any:
            request, key = await self._admit(method, request, context, parse)
            token = set_client_key(key)
            try:
                return await inner(request, context)
            finally:
                reset_client_key(token)
                self._release(key)

        return gated

    def _stream(
        self, method: str, inner: Callable[..., AsyncIterator[Any]], parse: Parser
    ) -> Callable[..., AsyncIterator[Any]]:
        async def gated(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            request, key = await self._admit(method, request, context, parse)
            try:
                async for item in inner(request, context):
                    yield item
            finally:
                self._release(key)

        return gated

    def _bidi(
        self, method: str, inner: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        """A stream of sends: admitted once as a call with an empty body (its signed
        metadata), then every message checked by the StreamAccess left to the handler."""

        async def gated(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            signed: list[SignedCall] = []
            _, key = await self._admit(method, EMPTY_BODY, context, None, signed)
            token = set_client_key(key)
            set_stream_access(
                StreamAccess(
                    method, self._authorizer, signed[0] if signed else None, self._limits, key
                )
            )
            try:
                async for item in inner(requests, context):
                    yield item
            finally:
                # A stream closed from another context (its generator finalized at
                # shutdown) cannot reset the key there, nor needs to: that context never
                # had it.
                with contextlib.suppress(ValueError):
                    reset_client_key(token)
                self._release(key)

        return gated

    async def _admit(
        self,
        method: str,
        request: Any,
        context: grpc.aio.ServicerContext,
        parse: Parser,
        signed: list[SignedCall] | None = None,
    ) -> tuple[Any, str]:
        """The request (parsed when it came as bytes) and the client's key (limits,
        creations) once the call may go on; aborts the call otherwise. ``signed``: where
        to put the call's signed fields (a stream's, for its messages' checks)."""
        peer = context.peer()
        key = peer_host(peer)
        access_key = ""
        try:
            if self._authorizer is not None:
                account, call = self._authorizer.authenticate_call(
                    method, context.invocation_metadata(), request
                )
                if signed is not None:
                    signed.append(call)
                access_key = key = account.access_key
                request = _parsed(parse, request)
                set_caller(Caller(access_key, self._authorizer.document))
            if self._limits is not None:
                why = self._limits.acquire(key)
                if why:
                    raise AccessDenied(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{key}: {why}")
            try:
                if self._authorizer is not None:
                    self._authorizer.authorize(
                        account, method[len(BROKER_SERVICE_PREFIX) :], request
                    )
            except AccessDenied:
                self._release(key)
                raise
        except AccessDenied as exc:
            if self._should_log(exc.code, key):
                log.warning(
                    "refused %s from %s%s: %s: %s",
                    method,
                    peer,
                    f" (access key {access_key})" if access_key else "",
                    exc.code.name,
                    exc.log_reason,
                )
            await context.abort(exc.code, str(exc))
        return request, key

    def _should_log(self, code: grpc.StatusCode, key: str) -> bool:
        """Every refusal but a flood's, which is logged once per client and interval."""
        return code is not grpc.StatusCode.RESOURCE_EXHAUSTED or self._reports.should_report(key)

    def _release(self, key: str) -> None:
        if self._limits is not None:
            self._limits.release(key)


def _refused(method: str, handler: Any) -> Any:
    """A client-streaming handler the gate does not check request by request: the call is
    refused, never let through unchecked (one added later must be gated, as SendStream's
    messages are, before it can be reached)."""
    why = f"{method}: client-streaming calls are not served through the broker's access gate"

    async def refuse(_requests: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, why)

    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            refuse, handler.request_deserializer, handler.response_serializer
        )

    async def refuse_stream(_requests: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, why)
        yield  # an async generator, as a stream-stream behaviour must be

    return grpc.stream_stream_rpc_method_handler(
        refuse_stream, handler.request_deserializer, handler.response_serializer
    )
