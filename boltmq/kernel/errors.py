"""The one error vocabulary of every BoltMQ service, and the one place errors become statuses.

Domain code raises a :class:`ServiceError` subclass that names what went wrong;
the class carries the gRPC status a caller gets (``code``). Each service
derives its own names from these (the broker's ``NotFound`` of a topic, the
store's ``BadRequest`` of a field, the HA service's ``CannotResume``), and its
servicer wraps every RPC in :func:`answers_errors`, which ends the call with
``(error.code, str(error))``, and logs a warning for every code but the caller's own
mistakes (:data:`CALLER_MISTAKES`), which would only flood the log. Anything else a
handler raises is a bug and reaches gRPC as it is (``UNKNOWN``, logged by the server).

Outcomes that are not errors (a pull that found nothing, a put the store
refused with a status enum) stay values in the responses.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc

log = logging.getLogger(__name__)

CALLER_MISTAKES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
"""Codes that answer a caller's own mistake: not logged by :func:`answers_errors`."""


class ServiceError(Exception):
    """Base of every error a BoltMQ service answers a caller with."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    """The status of the call this error ends."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(ServiceError):
    """A malformed request; the message names the field."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ServiceError):
    """An unknown topic, group, broker or file."""

    code = grpc.StatusCode.NOT_FOUND


class PermissionDenied(ServiceError):
    """The caller or the resource's settings forbid the operation."""

    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPrecondition(ServiceError):
    """The operation is not allowed in the current state."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ServiceError):
    """The service, or one it depends on, cannot answer now; the caller may retry."""

    code = grpc.StatusCode.UNAVAILABLE


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def answers_errors(handler: _Handler) -> _Handler:
    """Wrap an RPC handler (unary or server-streaming) so a :class:`ServiceError`
    ends the call with its status and message.

    The handler is a method ``(self, request, context)``; an async generator for a
    streaming RPC, a coroutine function otherwise.
    """
    if inspect.isasyncgenfunction(handler):

        @functools.wraps(handler)
        async def streaming(
            self: Any, request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            try:
                async for item in handler(self, request, context):
                    yield item
            except ServiceError as exc:
                await _abort(handler, context, exc)

        return cast(_Handler, streaming)

    unary = cast(Callable[..., Awaitable[Any]], handler)

    @functools.wraps(handler)
    async def answering(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await unary(self, request, context)
        except ServiceError as exc:
            await _abort(handler, context, exc)
        raise AssertionError("context.abort() always raises")

    return cast(_Handler, answering)


async def _abort(
    handler: Callable[..., Any], context: grpc.aio.ServicerContext, error: ServiceError
) -> None:
    """End the call with ``error``'s status, logged unless it is the caller's mistake."""
    if error.code not in CALLER_MISTAKES:
        log.warning("%s failed: %s", handler.__qualname__, error)
    await context.abort(error.code, str(error))
