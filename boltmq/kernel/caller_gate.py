"""CallerGate: the server interceptor that holds each caller of a service to its limits.

The store, the HA service and the registry each put one in front of their
service (the broker has its own, :mod:`services.broker.access.gate`). Without
it one caller, a compromised component or, on the registry's port, any
application, could keep the service busy with parallel calls or open streams
until nobody else is served.

Per call of the service the gate takes one slot of the caller's
:class:`~boltmq.kernel.caller_limits.CallerLimits` (a token of its rate and
one of its calls in flight) and gives the in-flight one back when the call
ends; a stream holds its slot until it ends, however long it stays open. A
call beyond a limit is refused at once, before its handler runs, with
``RESOURCE_EXHAUSTED`` and a message naming the caller, the service and the
setting, e.g.::

    too many calls from boltmq://broker-a/ha to the store: more than 3 calls
    in flight at once (caller_in_flight_max); retry later

A caller is its component identity (``boltmq://<group>/<role>``) when the
internal gate is on and its certificate names one (the internal CA signed
it, so nobody else can spend that budget), else its IP address. The gate
runs before the internal gate: a caller's refused calls are charged too, so
a flood of them costs a dictionary look-up each. Refusals are logged at
WARNING, once per caller every
:data:`~boltmq.kernel.caller_limits.REPORT_INTERVAL_S`. Health, reflection
and other services pass untouched.

:func:`caller_gate` builds it from the settings
(:class:`~boltmq.kernel.config.CallerLimitSettings`): none when every limit is 0.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import grpc

from boltmq.kernel.caller_limits import CallerLimits, peer_host
from boltmq.kernel.config import CallerLimitSettings
from boltmq.kernel.internal_gate import HANDLER_KINDS, InternalGate
from boltmq.kernel.peer_identity import IdentityError, IdentityReader

log = logging.getLogger(__name__)


class CallerGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc classes are Any
    """Per-caller rate and in-flight limits on every call of one service."""

    def __init__(
        self,
        service_name: str,
        label: str,
        limits: CallerLimits,
        reader: IdentityReader | None = None,
    ) -> None:
        self._prefix = f"/{service_name}/"
        self._label = label
        self.limits = limits
        """The buckets, by caller key."""
        self._reader = reader

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(self._prefix):
            return handler
        for kind, make in HANDLER_KINDS:
            inner = getattr(handler, kind)
            if inner is not None:
                return make(
                    self._limited(method, inner),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def caller_key(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's component identity when it has one, else its IP address."""
        if self._reader is not None:
            with contextlib.suppress(IdentityError):
                return str(self._reader.of_caller(context))
        return peer_host(context.peer())

    async def _admit(self, method: str, context: grpc.aio.ServicerContext) -> str:
        """The caller's key once it holds a slot; aborts the call otherwise."""
        key = self.caller_key(context)
        why = self.limits.acquire(key)
        if why:
            message = f"too many calls from {key} to the {self._label}: {why}; retry later"
            if self.limits.should_report(key):
                log.warning("refused %s from %s: RESOURCE_EXHAUSTED: %s", method, key, message)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        return key

    def _limited(self, method: str, inner: Callable[..., Any]) -> Any:
        admit, release = self._admit, self.limits.release
        if inspect.isasyncgenfunction(inner):

            async def limited_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                key = await admit(method, context)
                try:
                    stream: AsyncGenerator[Any, None] = inner(request, context)
                    async with contextlib.aclosing(stream):
                        async for item in stream:
                            yield item
                finally:
                    release(key)

            return limited_stream

        async def limited(request: Any, context: grpc.aio.ServicerContext) -> Any:
            key = await admit(method, context)
            try:
                return await inner(request, context)
            finally:
                release(key)

        return limited


def caller_gate(
    settings: CallerLimitSettings,
    service_name: str,
    label: str,
    internal: InternalGate | None,
    clock_s: Callable[[], float] = time.monotonic,
) -> CallerGate | None:
    """The limits of service ``service_name`` (``label`` in messages: "store", ...) with
    ``settings``; callers keyed by the ``internal`` gate's identities when there is one.
    None when every limit is 0."""
    if not settings.caller_request_rate_per_s and not settings.caller_in_flight_max:
        return None
    limits = CallerLimits(
        settings.caller_request_rate_per_s,
        settings.caller_request_burst,
        settings.caller_in_flight_max,
        clock_s=clock_s,
        settings_prefix="caller",
    )
    return CallerGate(service_name, label, limits, internal.reader if internal else None)
