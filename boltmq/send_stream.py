"""SendStream: the SDK's sends to one broker on one open ``BrokerService/SendStream``.

A unary SendMessage pays a gRPC call per send; here every send of every thread
to one broker address is one message each way on one bidi stream
(bench/relay_floor.py ``--call stream`` measured the stream ~35 % cheaper). The
producer uses it by default (``ProducerOptions.send_path``); a send is still
one SendRequest (a natural batch, :mod:`boltmq.send_batcher`, is one request).

- Each request carries a correlation id (growing along the stream), the
  serialized SendRequest, its deadline as ``timeout_ms`` (the time the send has
  left) and its trace context; the broker answers each by id, in the order the
  sends end (:mod:`services.broker.send.send_stream` is its side).
- The sends of every thread that queued while gRPC's writer was busy with the
  previous message leave together as one stream message (the others in its
  ``more``, up to ``COALESCE_MAX_BYTES``), once the broker's initial metadata
  said it takes them (an older broker gets one send a message); the stream
  opens with the same header, so the broker's answers that are ready together
  come back as one message the same way. Sends
  to different topics and queues share a message, which natural batching
  (one topic and queue a call) cannot do.
- A send answered with a code fails as a unary call with that code would:
  :class:`StreamSendError` is a ``grpc.RpcError`` with ``code()`` and
  ``details()``, so the producer's retry policy treats both paths alike.
- Back-pressure: at most ``in_flight_max`` sends wait on one stream; a send
  finding none free waits for one until its own deadline (DEADLINE_EXCEEDED).
- With credentials, the stream opens signed (a call of SendStream with an empty
  body, for the broker group at the address) and each request carries its own
  signature (:func:`boltmq.kernel.signing.stream_signature`).
- The stream opens at the first send. When it breaks (the broker restarts, the
  connection drops, the broker refuses it), every send waiting on it fails with
  the stream's status (UNAVAILABLE when it merely ended), which the producer
  retries as it would a failed call: the message keeps its bytes and so its
  ``UNIQ_KEY``, so an acknowledged send is never lost and a retried one may be
  stored twice exactly as with unary retries. The next send opens a new stream.

Threads: the senders, and gRPC's own thread that writes the request iterator.
No thread only reads: one of the waiting senders at a time reads the answers
(leader and followers) and hands each to its sender, until its own comes; it
then wakes another waiting sender to read on. A sender alone reads its own
answer, as a unary call does, without a hand-off to another thread (a reader
thread was measured slower: one more wake-up per send, which costs most on a
loaded machine). A stream that answers nothing for ``STALL_S`` past the reading
sender's deadline is cancelled by one watchdog thread of the process (the
broker answers every send by its deadline, so only a stopped broker or a dead
connection stalls it); its sends fail UNAVAILABLE and are retried.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import grpc

from boltmq.kernel import telemetry
from boltmq.kernel.signing import (
    EMPTY_BODY,
    NONCE_HEADER,
    Credentials,
    signed_metadata,
    stream_signature,
)
from boltmq.v1 import broker_pb2

METHOD = "/boltmq.v1.BrokerService/SendStream"
STALL_S = 1.0
"""How long past the reading sender's deadline a stream may answer nothing."""
WATCH_INTERVAL_S = 0.25
"""How often the watchdog looks at the streams being read."""
COALESCE_MAX_BYTES = 4 * 1024 * 1024
"""Sends join one stream message while it stays under this size (the first always goes)."""
MORE_HEADER = ("boltmq-send-more", "1")
"""The broker's initial metadata saying it takes several sends a message."""
SECTIONS_HEADER = ("boltmq-send-sections", "1")
"""The broker's initial metadata saying it takes SendRequests of several topics
(``sections``, :mod:`boltmq.send_request`)."""
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class StreamSendError(grpc.RpcError):  # type: ignore[misc]  # grpc has no type information
    """A send on a stream that failed: the status a unary call would have ended with."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        """The send's status code."""
        return self._code

    def details(self) -> str:
        """Why, as the broker (or the stream's end) said."""
        return self._details


class _Waiter:
    """One send waiting for its answer, or for its turn to read."""

    __slots__ = ("signal", "done", "answer", "error")

    def __init__(self) -> None:
        self.signal: threading.Event | None = None
        """Set when the send ended (``done``) or when it is to read next; made (under the
        stream's lock) only when the send first waits: a send that reads its own answer
        never needs one, and an Event costs a send several microseconds."""
        self.done = False
        self.answer: broker_pb2.SendStreamResponse | None = None
        self.error: StreamSendError | None = None

    def wake(self) -> None:
        """Wake the send if it waits (its state, changed under the stream's lock, is
        what a send that has not waited yet finds when it looks)."""
        signal = self.signal
        if signal is not None:
            signal.set()


class _Open:
    """One opened gRPC stream: its requests' queue, its waiting sends, its nonce."""

    def __init__(self, nonce: str, written: list[int]) -> None:
        self.written = written
        """[stream messages, sends] written, shared by the SendStream's streams."""
        self.outgoing: queue.SimpleQueue[broker_pb2.SendStreamRequest | None] = queue.SimpleQueue()
        self.pending: dict[int, _Waiter] = {}
        self.nonce = nonce
        self.ids = itertools.count(1)
        self.broken = False
        self.reading = False
        """True while a sender reads the answers."""
        self.read_deadline = 0.0
        """Monotonic deadline of the reading sender's own send (the watchdog's)."""
        self.call: grpc.Call | None = None
        self.coalesce: bool | None = None
        """Whether the broker takes several sends a message (None: not known yet)."""
        self.sections = False
        """Whether the broker takes SendRequests of several topics (known with coalesce)."""

    def requests(self) -> Iterator[broker_pb2.SendStreamRequest]:
        """The stream messages gRPC's writer thread sends: each send queued, with those
        queued behind it in its ``more`` once the broker said it takes them."""
        held: list[broker_pb2.SendStreamRequest | None] = []  # for the next message
        while True:
            first = held.pop() if held else self.outgoing.get()
            if first is None:
                return
            if self.coalesce is None and first.id > 1:  # the first went: headers are due
                self.learn_headers()
            size = -1  # measured once another send is queued behind it
            while self.coalesce and not self.outgoing.empty():
                queued = self.outgoing.get_nowait()  # this thread alone takes from it
                if size < 0:
                    size = first.ByteSize()
                grown = size + queued.ByteSize() if queued is not None else 0
                if queued is None or grown > COALESCE_MAX_BYTES:
                    held.append(queued)  # the end, or the first of the next message
                    break
                size = grown
                first.more.append(queued)
            self.written[0] += 1
            self.written[1] += 1 + len(first.more)
            yield first

    def learn_headers(self) -> None:
        """Read what the broker takes from its initial metadata (nothing when the stream
        failed); due once the first send went out (or came back)."""
        assert self.call is not None  # set before any send is queued
        try:
            headers = tuple(self.call.initial_metadata() or ())
        except grpc.RpcError:
            headers = ()
        self.sections = SECTIONS_HEADER in headers
        self.coalesce = MORE_HEADER in headers

    def stalled(self, now: float) -> bool:
        return self.reading and now > self.read_deadline + STALL_S


class _Watchdog:
    """One thread for the process: cancels streams whose reader waits past STALL_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened: weakref.WeakSet[_Open] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def watch(self, opened: _Open) -> None:
        with self._lock:
            self._opened.add(opened)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="boltmq-send-stream-watchdog", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL_S)
            now = time.monotonic()
            with self._lock:
                stalled = [o for o in self._opened if not o.broken and o.stalled(now)]
            for opened in stalled:
                if opened.call is not None:
                    opened.call.cancel()


_WATCHDOG = _Watchdog()


class SendStream:
    """Sends of every thread to one broker address on one stream (module docstring)."""

    def __init__(
        self,
        channel: grpc.Channel,
        in_flight_max: int,
        credentials: Credentials | None = None,
        client_id: str = "",
        target: Callable[[], str] = lambda: "",
    ) -> None:
        if in_flight_max < 1:
            raise ValueError(f"in_flight_max must be >= 1, got {in_flight_max}")
        self._method = channel.stream_stream(
            METHOD,
            request_serializer=broker_pb2.SendStreamRequest.SerializeToString,
            response_deserializer=broker_pb2.SendStreamResponse.FromString,
        )
        self._credentials = credentials
        self._client_id = client_id
        self._target = target
        self.in_flight_max = in_flight_max
        self._lock = threading.Lock()
        self._in_flight = 0
        """Sends between their place taken and their end (at most ``in_flight_max``)."""
        self._room = threading.Condition(self._lock)
        """Notified as a send ends while others wait for a place."""
        self._room_waiters = 0
        self._open: _Open | None = None
        self._closed = False
        self.opened = 0
        """Streams opened so far (a reconnect opens another)."""
        self.written = [0, 0]
        """[stream messages, sends] written so far: their ratio is the coalescing."""

    @property
    def in_flight(self) -> int:
        """Sends that hold a place on this stream now (at most ``in_flight_max``)."""
        return self._in_flight

    @property
    def takes_sections(self) -> bool:
        """Whether the open stream's broker said it takes SendRequests of several topics
        (False before the stream's first send was answered)."""
        opened = self._open
        return opened is not None and not opened.broken and opened.sections

    def send(self, request: bytes, timeout_s: float) -> broker_pb2.SendResponse:
        """The broker's answer to the serialized SendRequest ``request``; StreamSendError
        with the code a unary call would have ended with otherwise."""
        deadline = time.monotonic() + timeout_s
        waiter = _Waiter()
        traceparent = telemetry.current_traceparent()
        with self._lock:
            while self._in_flight >= self.in_flight_max:
                self._await_room(deadline)
            self._in_flight += 1
        try:
            return self._send(request, deadline, waiter, traceparent)
        finally:
            with self._lock:
                self._in_flight -= 1
                if self._room_waiters:
                    self._room.notify()

    def _await_room(self, deadline: float) -> None:
        """Wait (under the lock) for a send to end; DEADLINE_EXCEEDED past ``deadline``."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise StreamSendError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no free place on the send stream ({self.in_flight_max} sends in flight) "
                "before the send's deadline",
            )
        self._room_waiters += 1
        try:
            self._room.wait(left)
        finally:
            self._room_waiters -= 1

    def _send(
        self, request: bytes, deadline: float, waiter: _Waiter, traceparent: str
    ) -> broker_pb2.SendResponse:
        with self._lock:  # ids enter the queue in the order they are given: they must grow
            if self._closed:
                raise StreamSendError(grpc.StatusCode.CANCELLED, "the client is closed")
            opened = self._current()
            message_id = next(opened.ids)
            opened.pending[message_id] = waiter
            timeout_ms = max(1, int((deadline - time.monotonic()) * 1000))
            signature = ""
            if self._credentials is not None:
                signature = stream_signature(
                    self._credentials.secret_key,
                    self._credentials.algorithm,
                    opened.nonce,
                    message_id,
                    timeout_ms,
                    traceparent,
                    request,
                )
            opened.outgoing.put(
                broker_pb2.SendStreamRequest(
                    id=message_id,
                    send=request,
                    timeout_ms=timeout_ms,
                    traceparent=traceparent,
                    signature=signature,
                )
            )
        self._await(opened, waiter, message_id, deadline)
        if waiter.error is not None:
            raise waiter.error
        answer = waiter.answer
        assert answer is not None  # done without an error
        if answer.code:
            raise StreamSendError(_CODES.get(answer.code, grpc.StatusCode.UNKNOWN), answer.error)
        return answer.response

    def _await(self, opened: _Open, waiter: _Waiter, message_id: int, deadline: float) -> None:
        """Until the send ended: read the answers while nobody else does, else wait."""
        while True:
            with self._lock:
                if waiter.done:
                    return
                lead = not opened.reading and not opened.broken
                if lead:
                    opened.reading = True
                    opened.read_deadline = deadline
                elif waiter.signal is None:
                    waiter.signal = signal = threading.Event()
                else:
                    signal = waiter.signal
                    signal.clear()
            if lead:
                self._lead(opened, waiter)
                return
            left = deadline - time.monotonic()
            if left <= 0 or not signal.wait(left):
                self._give_up(opened, waiter, message_id)
                return

    def _give_up(self, opened: _Open, waiter: _Waiter, message_id: int) -> None:
        """The send's deadline passed while it waited; the reading goes on without it (it
        may have just been handed the reading: then it passes it on)."""
        successor = None
        with self._lock:
            if waiter.done:
                return
            opened.pending.pop(message_id, None)
            waiter.done = True
            waiter.error = StreamSendError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "no answer before the send's deadline"
            )
            if not opened.reading:
                successor = next((w for w in opened.pending.values() if not w.done), None)
        if successor is not None:
            successor.wake()

    def _lead(self, opened: _Open, mine: _Waiter) -> None:
        """Read answers, handing each to its send, until ``mine`` ended; then pass the
        reading to another waiting send (or fail every send when the stream ended)."""
        call = opened.call
        assert call is not None  # opened before any send registers
        try:
            while not mine.done:
                carried = next(call)
                if opened.coalesce is None:  # answered: the headers came before
                    opened.learn_headers()
                ended = []
                more = carried.more
                with self._lock:
                    for answer in (carried, *more) if more else (carried,):
                        waiter = opened.pending.pop(answer.id, None)
                        if waiter is not None:
                            waiter.answer = answer
                            waiter.done = True
                            ended.append(waiter)
                for waiter in ended:
                    if waiter is not mine:
                        waiter.wake()
        except StopIteration:
            self._break(opened, "the broker ended the send stream", grpc.StatusCode.UNAVAILABLE)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code is grpc.StatusCode.CANCELLED and not self._closed:
                code, details = grpc.StatusCode.UNAVAILABLE, "it stopped answering"
            self._break(opened, f"send stream: {details}", code or grpc.StatusCode.UNAVAILABLE)
        finally:
            with self._lock:
                opened.reading = False
                successor = (
                    next((w for w in opened.pending.values() if not w.done), None)
                    if opened.pending
                    else None
                )
            if successor is not None:
                successor.wake()

    def _break(self, opened: _Open, why: str, code: grpc.StatusCode) -> None:
        """The stream is over: every send waiting on it fails with ``code``."""
        error = StreamSendError(code, why)
        with self._lock:
            opened.broken = True
            waiting, opened.pending = opened.pending, {}
            if self._open is opened:
                self._open = None
            for waiter in waiting.values():
                waiter.error = error
                waiter.done = True
        opened.outgoing.put(None)  # ends gRPC's request thread
        for waiter in waiting.values():
            waiter.wake()

    def _current(self) -> _Open:
        """The open stream, opened now when there is none (under the lock)."""
        if self._open is not None and not self._open.broken:
            return self._open
        metadata: tuple[tuple[str, str], ...] = ()
        nonce = ""
        if self._credentials is not None:
            metadata = signed_metadata(
                self._credentials,
                METHOD,
                self._client_id,
                EMPTY_BODY,
                target=self._target(),
            )
            nonce = dict(metadata)[NONCE_HEADER]
        opened = _Open(nonce, self.written)
        opened.call = self._method(opened.requests(), metadata=(*metadata, MORE_HEADER))
        self._open = opened
        self.opened += 1
        _WATCHDOG.watch(opened)
        return opened

    def close(self) -> None:
        """Half-close the stream (sends still waiting fail CANCELLED) and open no other."""
        with self._lock:
            self._closed = True
            opened, self._open = self._open, None
        if opened is not None and opened.call is not None:
            opened.outgoing.put(None)
            opened.call.cancel()
            if not opened.reading:
                self._break(opened, "the client is closed", grpc.StatusCode.CANCELLED)
