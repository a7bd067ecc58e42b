"""In-process calls: a service calling another served by the same process, with no hop.

When ``boltmq serve broker --with-store`` runs a broker and its store in one
process (:mod:`boltmq.kernel.runtime`, :func:`~boltmq.kernel.runtime.serve_together`),
every call from the broker to its store would still cross gRPC: serialized,
written to a socket, read back and parsed by the same process, at a few
hundred microseconds of CPU a call (``bench/grpc_floor.py``). Here the
broker's channel to that address calls the store's handlers directly on the
same event loop instead, the way gRPC's in-process transport does in Java
and C++:

- :class:`HandlerTable` records the handlers a service registers on its gRPC
  server (:func:`recording`), the last registered for a method winning as in
  grpc (``runtime.answer_encoded`` relies on that);
- :func:`serve_here` makes a table reachable at an address for this process
  only; :func:`channel_to` gives an :class:`InProcessChannel` for such an
  address (``boltmq.kernel.channels.channel`` asks first), None for any other;
- the protobuf objects pass as they are: a request is serialized only when the
  caller handed bytes, an answer only when the caller asked for bytes and the
  handler built an object (or parsed when the handler wrote bytes and the
  caller wants an object);
- a handler's ``context.abort`` and its unexpected exceptions reach the caller
  as :class:`grpc.aio.AioRpcError` with the code a remote call would carry
  (an unexpected one as UNKNOWN), a deadline as DEADLINE_EXCEEDED, so the
  caller's error translation is the same;
- a unary handler runs in the caller's task (the caller's cancellation is the
  call's); a streaming one in a task of its own, cancelled with the call.

What is skipped, deliberately: the server's interceptors (the caller-identity
gate and per-caller limits guard the process's network boundary; a call
that never leaves the process has no peer to check) and the client's (trace
context needs no propagation: a span of the method is opened in the caller's
trace when it records).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import grpc
from opentelemetry import trace

PEER = "in-process"
"""``context.peer()`` of an in-process call (not an ``ipv4:``/``ipv6:`` address)."""

_tracer = trace.get_tracer(__name__)
Codec = Callable[[Any], Any]
_END = object()
"""Marks the end of a call's requests or answers in its queue."""


class HandlerTable:
    """The RPC method handlers one server registered, by full method path."""

    def __init__(self) -> None:
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []

    def add_registered_method_handlers(
        self, service_name: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for method, handler in handlers.items():
            self._methods[f"/{service_name}/{method}"] = handler

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def handler(self, method: str) -> grpc.RpcMethodHandler | None:
        """The handler grpc would run for ``method`` (``/package.Service/Method``)."""
        found = self._methods.get(method)
        if found is not None:
            return found
        details = _CallDetails(method)
        for generic in self._generic:
            found = generic.service(details)
            if found is not None:
                return found
        return None


class _CallDetails:
    """The call details a generic handler looks a method up by."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class _Recording:
    """A server whose handler registrations also go into a table (:func:`recording`)."""

    def __init__(self, server: Any, table: HandlerTable) -> None:
        self._server = server
        self._table = table

    def add_registered_method_handlers(
        self, service_name: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self._server.add_registered_method_handlers(service_name, handlers)
        self._table.add_registered_method_handlers(service_name, handlers)

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        handlers = tuple(handlers)
        self._server.add_generic_rpc_handlers(handlers)
        self._table.add_generic_rpc_handlers(handlers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def recording(server: grpc.aio.Server, table: HandlerTable) -> Any:
    """``server`` for ``add_*Servicer_to_server``: every handler also lands in ``table``."""
    return _Recording(server, table)


_served: dict[str, HandlerTable] = {}
_served_lock = threading.Lock()


def serve_here(address: str, table: HandlerTable) -> None:
    """Make ``table`` the in-process answer to calls to ``address`` in this process."""
    with _served_lock:
        _served[address] = table


def withdraw(address: str) -> None:
    """Calls to ``address`` go over the network again (the server stopped)."""
    with _served_lock:
        _served.pop(address, None)


def channel_to(address: str) -> InProcessChannel | None:
    """A channel calling the handlers served here at ``address``; None when none are."""
    table = _served.get(address)
    return InProcessChannel(address, table) if table is not None else None


# --------------------------------------------------------------------- the channel
class InProcessChannel:
    """The part of ``grpc.aio.Channel`` the generated stubs and BoltMQ's clients use."""

    def __init__(self, address: str, table: HandlerTable) -> None:
        self.address = address
        self._table = table
        self._closed = False

    def unary_unary(self, method: str, *codecs: Any, **named: Any) -> _OneAnswer:
        return _OneAnswer(*self._parts(method, codecs, named), request_streaming=False)

    def unary_stream(self, method: str, *codecs: Any, **named: Any) -> _Streaming:
        return _Streaming(*self._parts(method, codecs, named), request_streaming=False)

    def stream_stream(self, method: str, *codecs: Any, **named: Any) -> _Streaming:
        return _Streaming(*self._parts(method, codecs, named), request_streaming=True)

    def stream_unary(self, method: str, *codecs: Any, **named: Any) -> _OneAnswer:
        return _OneAnswer(*self._parts(method, codecs, named), request_streaming=True)

    def _parts(
        self, method: str, codecs: tuple[Any, ...], named: dict[str, Any]
    ) -> tuple[Callable[[], grpc.RpcMethodHandler | None], str, Codec | None, Codec | None]:
        """A multicallable's arguments from grpc's (``method, request_serializer,
        response_deserializer``, by position or by name; the others ignored)."""
        serialize = named.get("request_serializer", codecs[0] if codecs else None)
        parse = named.get("response_deserializer", codecs[1] if len(codecs) > 1 else None)
        return self._method(method), method, serialize, parse

    def _method(self, method: str) -> Callable[[], grpc.RpcMethodHandler | None]:
        def find() -> grpc.RpcMethodHandler | None:
            if self._closed:  # as a remote call on a closed channel fails
                raise _error(
                    grpc.StatusCode.UNAVAILABLE, f"the channel to {self.address} is closed"
                )
            return self._table.handler(method)

        return find

    async def channel_ready(self) -> None:
        return None

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return grpc.ChannelConnectivity.READY

    async def close(self, grace: float | None = None) -> None:
        """Later calls fail as UNAVAILABLE; calls under way finish."""
        self._closed = True


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _Context:
    """The ``grpc.aio.ServicerContext`` a handler sees in an in-process call."""

    def __init__(
        self,
        metadata: Any,
        timeout: float | None,
        answers: asyncio.Queue[Any] | None,
        requests: asyncio.Queue[Any] | None = None,
    ) -> None:
        self._metadata = tuple(metadata or ())
        loop = asyncio.get_running_loop()
        self._deadline = None if timeout is None else loop.time() + timeout
        self._answers = answers
        self._requests = requests
        self.metadata_sent = asyncio.Event()
        self.code_set: grpc.StatusCode | None = None
        self.details_set = ""
        self.cancelled_now = False
        self._done_callbacks: list[Callable[[Any], None]] = []

    # what the handlers use
    def peer(self) -> str:
        return PEER

    def invocation_metadata(self) -> tuple[Any, ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def cancelled(self) -> bool:
        return self.cancelled_now

    def done(self) -> bool:
        return self.cancelled_now

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._done_callbacks.append(callback)

    def run_done_callbacks(self) -> None:
        for callback in self._done_callbacks:
            with contextlib.suppress(Exception):
                callback(self)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code_set = code

    def set_details(self, details: str) -> None:
        self.details_set = details

    def code(self) -> grpc.StatusCode | None:
        return self.code_set

    def details(self) -> str:
        return self.details_set

    def set_trailing_metadata(self, metadata: Any) -> None:
        return None

    def trailing_metadata(self) -> tuple[Any, ...]:
        return ()

    def set_compression(self, compression: Any) -> None:
        return None

    def disable_next_message_compression(self) -> None:
        return None

    async def send_initial_metadata(self, metadata: Any) -> None:
        self.metadata_sent.set()

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> None:
        self.code_set, self.details_set = code, details
        raise grpc.aio.AbortError(details)

    async def abort_with_status(self, status: Any) -> None:
        await self.abort(status.code, status.details)

    async def write(self, message: Any) -> None:
        if self._answers is None:
            raise RuntimeError("write() on a call that answers once")
        self.metadata_sent.set()
        self._answers.put_nowait(message)

    async def read(self) -> Any:
        if self._requests is None:
            raise RuntimeError("read() on a call with one request")
        request = await self._requests.get()
        return grpc.aio.EOF if request is _END else request

    def failure(self, exc: BaseException) -> grpc.aio.AioRpcError:
        """The error the caller gets for a handler that raised ``exc``."""
        if isinstance(exc, grpc.aio.AioRpcError):
            return exc
        if isinstance(exc, grpc.aio.AbortError) or self.code_set not in (None, grpc.StatusCode.OK):
            return _error(self.code_set or grpc.StatusCode.UNKNOWN, self.details_set)
        return _error(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc).__name__}: {exc}")

    def ended(self) -> grpc.aio.AioRpcError | None:
        """The error of a handler that returned after ``set_code`` of a failure."""
        if self.code_set in (None, grpc.StatusCode.OK):
            return None
        return _error(self.code_set, self.details_set)


class _Method:
    """What every multicallable holds: how to find the handler and how to shape messages."""

    def __init__(
        self,
        find: Callable[[], grpc.RpcMethodHandler | None],
        method: str,
        serialize: Codec | None,
        parse: Codec | None,
        *,
        request_streaming: bool,
    ) -> None:
        self._find = find
        self.method = method
        self._serialize = serialize
        """The caller's request serializer; None: it hands bytes."""
        self._parse = parse
        """The caller's answer parser; None: it wants bytes."""
        self._request_streaming = request_streaming

    def handler(self) -> grpc.RpcMethodHandler:
        found = self._find()
        if found is None:
            raise _error(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {self.method}")
        return found

    def request(self, handler: grpc.RpcMethodHandler, request: Any) -> Any:
        if self._serialize is None and handler.request_deserializer is not None:
            return handler.request_deserializer(request)  # the caller handed bytes
        return request

    def answer(self, handler: grpc.RpcMethodHandler, answer: Any) -> Any:
        if handler.response_serializer is None:  # the handler wrote the bytes itself
            return answer if self._parse is None else self._parse(answer)
        return handler.response_serializer(answer) if self._parse is None else answer

    def span(self) -> Any:
        """A span of the method when the caller's trace records (no interceptor opens one)."""
        if trace.get_current_span().is_recording():
            return _tracer.start_as_current_span(self.method, kind=trace.SpanKind.SERVER)
        return contextlib.nullcontext()


class _OneAnswer(_Method):
    """A call answered once (unary-unary, stream-unary), run in the caller's task."""

    def __call__(
        self, request: Any = None, *, timeout: float | None = None, metadata: Any = None, **_: Any
    ) -> Any:
        return self._call(request, timeout, metadata)

    async def _call(self, request: Any, timeout: float | None, metadata: Any) -> Any:
        # A call suspends its caller at least once, as a remote one does: a loop of
        # calls answered at once would otherwise never let the event loop run.
        await asyncio.sleep(0)
        handler = self.handler()
        context = _Context(metadata, timeout, None)
        try:
            with self.span():
                async with asyncio.timeout(timeout):
                    if self._request_streaming:
                        requests = _parsed(self, handler, _each(request))
                        answer = await handler.stream_unary(requests, context)
                    else:
                        answer = await handler.unary_unary(self.request(handler, request), context)
        except TimeoutError:
            raise _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except Exception as exc:
            raise context.failure(exc) from None
        finally:
            context.run_done_callbacks()
        failed = context.ended()
        if failed is not None:
            raise failed
        return self.answer(handler, answer)


class _Streaming(_Method):
    def __call__(
        self, request: Any = None, *, timeout: float | None = None, metadata: Any = None, **_: Any
    ) -> StreamCall:
        call = StreamCall(self, timeout, metadata)
        if not self._request_streaming:
            call.requests.put_nowait(request)
            call.requests.put_nowait(_END)
        elif request is not None:  # a request iterator, as grpc takes one
            call.feed(request)
        return call


class StreamCall:
    """An in-process streaming call: ``write``/``done_writing``, ``read`` or ``async for``,
    ``initial_metadata``, ``cancel``, as a ``grpc.aio`` streaming call offers them."""

    def __init__(self, method: _Streaming, timeout: float | None, metadata: Any) -> None:
        self._method = method
        self.requests: asyncio.Queue[Any] = asyncio.Queue()
        self._answers: asyncio.Queue[Any] = asyncio.Queue()
        self._context = _Context(metadata, timeout, self._answers, self.requests)
        self._outcome: grpc.aio.AioRpcError | None = None
        self._finished = False
        self._feeder: asyncio.Task[None] | None = None
        try:  # found as the call starts: a channel closed later does not end it
            self._handler: grpc.RpcMethodHandler | None = method.handler()
        except grpc.aio.AioRpcError as exc:  # the call's outcome: the first read gets it
            self._handler, self._outcome = None, exc
        self._task = asyncio.create_task(self._run(timeout), name=f"in-process {method.method}")

    async def _run(self, timeout: float | None) -> None:
        context = self._context
        try:
            handler = self._handler
            if handler is None:
                raise self._outcome or _error(grpc.StatusCode.UNIMPLEMENTED, self._method.method)
            behavior = handler.stream_stream or handler.unary_stream
            if handler.unary_stream is not None:
                first = await self.requests.get()
                argument: Any = self._method.request(handler, first)
            else:
                argument = _parsed(self._method, handler, self._incoming())
            async with asyncio.timeout(timeout):
                produced = behavior(argument, context)
                if inspect.isasyncgen(produced):
                    async for answer in produced:
                        await context.write(answer)
                else:
                    await produced
            self._outcome = context.ended()
        except TimeoutError:
            self._outcome = _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        except asyncio.CancelledError:
            self._outcome = _error(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        except Exception as exc:
            self._outcome = context.failure(exc)
        finally:
            self._finished = True
            context.metadata_sent.set()
            context.run_done_callbacks()
            self._answers.put_nowait(_END)

    async def _incoming(self) -> AsyncIterator[Any]:
        while (request := await self.requests.get()) is not _END:
            yield request

    def feed(self, requests: Any) -> None:
        """Write every request of an iterator, then end the requests (a task of the call's)."""

        async def pump() -> None:
            async for request in _each(requests):
                self.requests.put_nowait(request)
            self.requests.put_nowait(_END)

        self._feeder = asyncio.create_task(pump())

    async def write(self, request: Any) -> None:
        if self._finished:
            raise self._outcome or _error(grpc.StatusCode.INTERNAL, "the call has ended")
        self.requests.put_nowait(request)

    async def done_writing(self) -> None:
        self.requests.put_nowait(_END)

    async def read(self) -> Any:
        answer = await self._answers.get()
        if answer is _END:
            self._answers.put_nowait(_END)  # every later read ends too
            if self._outcome is not None:
                raise self._outcome
            return grpc.aio.EOF
        assert self._handler is not None  # an answer comes from the handler found
        return self._method.answer(self._handler, answer)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._each_answer()

    async def _each_answer(self) -> AsyncIterator[Any]:
        while (answer := await self.read()) is not grpc.aio.EOF:
            yield answer

    async def initial_metadata(self) -> grpc.aio.Metadata:
        await self._context.metadata_sent.wait()
        return grpc.aio.Metadata()

    async def wait_for_connection(self) -> None:
        return None

    def cancel(self) -> bool:
        if self._finished:
            return False
        self._context.cancelled_now = True
        self._task.cancel()
        if self._feeder is not None:
            self._feeder.cancel()
        return True

    def cancelled(self) -> bool:
        return self._context.cancelled_now

    def done(self) -> bool:
        return self._finished

    async def code(self) -> grpc.StatusCode:
        await asyncio.wait([self._task])
        return self._outcome.code() if self._outcome is not None else grpc.StatusCode.OK

    async def details(self) -> str:
        await asyncio.wait([self._task])
        return (self._outcome.details() or "") if self._outcome is not None else ""


async def _each(requests: Any) -> AsyncIterator[Any]:
    """The requests of a sync or async iterator."""
    if hasattr(requests, "__aiter__"):
        async for request in requests:
            yield request
    else:
        items: Iterator[Any] = iter(requests or ())
        for request in items:
            yield request


async def _parsed(
    method: _Method, handler: grpc.RpcMethodHandler, requests: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    async for request in requests:
        yield method.request(handler, request)
