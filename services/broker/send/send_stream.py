"""SendStreamer: the broker's side of ``BrokerService/SendStream``, sends on one open stream.

A unary SendMessage costs a gRPC call each; on an open bidi stream each send is
one message each way (bench/relay_floor.py ``--call stream``). Each request
carries a serialized SendRequest, exactly what a SendMessage call carries, and a
correlation id; the broker runs each as a SendMessage (the same
:class:`~services.broker.send.send_processor.SendProcessor`) and answers with
the id, in the order the sends finish, so a slow send holds up no other.

Rules, per stream:

- one stream message may carry several sends (its ``more``, taken in order after
  it; the SDK packs the sends that queued behind its previous write), each
  handled as if it came alone; a send in ``more`` with a ``more`` of its own is
  refused INVALID_ARGUMENT, that send alone. The broker says it takes them with
  the initial metadata :data:`MORE_METADATA` (a client that does not see it sends
  one per message). To a client that opened the stream with that same header,
  answers that are ready together leave as one message too (the first, the
  others in its ``more``); any other client gets one answer a message;
- a send may be a SendRequest of ``sections`` (several topics' raw batches,
  answered per section: :mod:`services.broker.send.send_sections`), run like any
  other; the broker says it takes them with the initial metadata
  :data:`SECTIONS_METADATA` (``boltmq-send-sections: 1``), sent beside
  :data:`MORE_METADATA` (``boltmq-send-more: 1``); a client that does not see it
  sends no sections;
- ids are > 0 and grow: a send whose id is not greater than the one before
  ends the stream INVALID_ARGUMENT (it is a broken client, or a replay);
- each request has its own deadline, ``timeout_ms`` from when the broker read
  it: a send still running then is cancelled and answered DEADLINE_EXCEEDED,
  that message alone (a unary call's deadline does the same to its call);
- each message is checked as a SendMessage call
  (:class:`~services.broker.access.stream_access.StreamAccess`: signature,
  client budget, rights); a refusal answers that message with the code a call
  would end with, and only a bad signature ends the stream;
- a send alone on the stream (nothing else running, nothing in its ``more``) runs
  in the stream's reader instead of a task of its own when ``inline`` says the
  store answers appends at once (served in this process, no flush or replica to
  wait for, as of the broker's last look at the store's role): a task costs the
  send a turn of the event loop. The reader reads on once it is answered. With a
  store that may make an append wait, every send gets a task, so a slow append
  never holds up the stream; in the reader, only a send that auto-creates its
  topic (the registries are told first) or meets a role change not seen yet
  holds up the stream's next message, no longer than that send's own deadline;
- at most ``in_flight_max`` sends run at once (``send_stream_in_flight_max``):
  a request beyond that is answered RESOURCE_EXHAUSTED at once, never queued
  (a client that does not bound itself cannot make the broker hold its
  backlog); the SDK keeps fewer in flight (``ProducerOptions.stream_in_flight_max``);
- each send is traced as a server span of ``SendStream`` whose parent is the
  request's ``traceparent`` (:func:`boltmq.kernel.telemetry.stream_message_span`);
- when the client half-closes, the sends in flight finish and are answered,
  then the stream ends; when the client goes away they are cancelled;
- when the broker shuts down (:meth:`SendStreamer.close`, before the grace
  period), each stream stops reading, answers the sends it has running and ends
  UNAVAILABLE: its client sends again on a new stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from boltmq.kernel import telemetry
from boltmq.kernel.errors import CALLER_MISTAKES, InvalidArgument, ServiceError, Unavailable
from boltmq.v1 import broker_pb2
from services.broker.access.authorizer import AccessDenied
from services.broker.access.stream_access import StreamAccess, StreamRefused
from services.broker.send.send_processor import SendProcessor

log = logging.getLogger(__name__)

METHOD = "/boltmq.v1.BrokerService/SendStream"
MORE_METADATA = (("boltmq-send-more", "1"),)
"""Sent as the stream's initial metadata: this broker takes several sends a message."""
SECTIONS_METADATA = (("boltmq-send-sections", "1"),)
"""Sent as the stream's initial metadata too: this broker takes SendRequests of
``sections`` (:mod:`services.broker.send.send_sections`)."""
ANSWERS_MAX_BYTES = 4 * 1024 * 1024
"""Answers join one stream message while it stays under this size."""
_END = None
"""Put on a stream's answers when every send of a half-closed stream is answered."""
_Answer = broker_pb2.SendStreamResponse | BaseException | None


def refusal(message_id: int, code: grpc.StatusCode, error: str) -> broker_pb2.SendStreamResponse:
    """The answer of a send that ended with ``code`` (what a SendMessage call would)."""
    return broker_pb2.SendStreamResponse(id=message_id, code=code.value[0], error=error)


class SendStreamer:
    """Serves SendStream calls over the broker's SendProcessor (module docstring)."""

    def __init__(
        self,
        send: SendProcessor,
        in_flight_max: int,
        inline: Callable[[], bool] = lambda: False,
    ) -> None:
        self._send = send
        self._in_flight_max = in_flight_max
        self._inline = inline
        """Whether a send alone may run in the reader (the module docstring)."""
        self._readers: set[asyncio.Task[None]] = set()
        """The request readers of the open streams (:meth:`close` stops them)."""
        self._closing = False

    def close(self) -> None:
        """Shutting down: every open stream stops reading, answers the sends it has
        running, then ends UNAVAILABLE, so its client reconnects (to another broker
        or this one restarted) instead of holding the grace period."""
        self._closing = True
        for reader in list(self._readers):
            reader.cancel()

    async def serve(
        self,
        requests: AsyncIterator[broker_pb2.SendStreamRequest],
        peer_address: str,
        access: StreamAccess,
        answers_together: bool = False,
    ) -> AsyncIterator[broker_pb2.SendStreamResponse]:
        """Every request's answer as its send ends; raises what ends the stream.
        ``answers_together``: the client reads answers in ``more``."""
        answers: asyncio.Queue[_Answer] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        if self._closing:
            raise Unavailable("the broker is shutting down: send elsewhere or retry")
        reader = asyncio.get_running_loop().create_task(
            self._read(requests, peer_address, access, answers, running)
        )
        self._readers.add(reader)
        reader.add_done_callback(self._readers.discard)
        try:
            held: list[_Answer] = []  # taken from the queue, for the next message
            while True:
                answer = held.pop() if held else await answers.get()
                if answer is _END:
                    return
                if isinstance(answer, BaseException):
                    raise answer
                size = answer.ByteSize()
                while answers_together and not answers.empty():  # ready now: together
                    ready = answers.get_nowait()
                    if not isinstance(ready, broker_pb2.SendStreamResponse):
                        held.append(ready)  # the end, or what ends the stream: next
                        break
                    grown = size + ready.ByteSize()
                    if grown > ANSWERS_MAX_BYTES:
                        held.append(ready)  # no room: the first of the next message
                        break
                    size = grown
                    answer.more.append(ready)
                yield answer
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()

    async def _read(
        self,
        requests: AsyncIterator[broker_pb2.SendStreamRequest],
        peer_address: str,
        access: StreamAccess,
        answers: asyncio.Queue[_Answer],
        running: set[asyncio.Task[None]],
    ) -> None:
        """Start a send per request until the client half-closes, then wait for them."""
        last_id = 0
        loop = asyncio.get_running_loop()
        try:
            async for carried in requests:
                for n, message in enumerate((carried, *carried.more)):
                    if message.id <= last_id:
                        raise InvalidArgument(
                            f"id: {message.id} is not greater than the id before it "
                            f"({last_id}); ids of a stream start above 0 and grow"
                        )
                    last_id = message.id
                    refused = self._refused(message, access, len(running), inner=n > 0)
                    if isinstance(refused, broker_pb2.SendStreamResponse):
                        answers.put_nowait(refused)
                        continue
                    if not running and not carried.more and self._inline():
                        try:
                            await self._one(message, refused, peer_address, answers)
                        finally:
                            access.done()
                        continue
                    task = loop.create_task(self._one(message, refused, peer_address, answers))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    # the budget slot admit() took, given back even by a task cancelled
                    # unstarted
                    task.add_done_callback(lambda _: access.done())
            if running:
                await asyncio.wait(set(running))
            answers.put_nowait(_END)
        except asyncio.CancelledError as exc:
            if not self._closing:  # the stream is over: serve() cancels the sends
                answers.put_nowait(exc)
                raise
            if running:
                await asyncio.wait(set(running))
            answers.put_nowait(Unavailable("the broker is shutting down: send again"))
        except (ServiceError, grpc.RpcError) as exc:
            answers.put_nowait(exc)

    def _refused(
        self,
        message: broker_pb2.SendStreamRequest,
        access: StreamAccess,
        running: int,
        inner: bool = False,
    ) -> broker_pb2.SendStreamResponse | broker_pb2.SendRequest:
        """The message's SendRequest when it may run, else its refusal (StreamRefused, for a
        bad signature, is raised: it ends the stream). ``inner``: it came in ``more``."""
        if inner and message.more:
            return refusal(
                message.id,
                grpc.StatusCode.INVALID_ARGUMENT,
                "more: a send carried in `more` cannot carry more of its own",
            )
        if message.timeout_ms <= 0:
            return refusal(
                message.id,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_ms must be > 0, got {message.timeout_ms}",
            )
        if running >= self._in_flight_max:
            return refusal(
                message.id,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"more than {self._in_flight_max} sends in flight on one stream "
                "(send_stream_in_flight_max); retry later",
            )
        try:
            return access.admit(message)
        except StreamRefused:
            raise
        except AccessDenied as exc:
            return refusal(message.id, exc.code, str(exc))

    async def _one(
        self,
        message: broker_pb2.SendStreamRequest,
        request: broker_pb2.SendRequest,
        peer_address: str,
        answers: asyncio.Queue[_Answer],
    ) -> None:
        """Run one send to its deadline and queue its answer."""
        try:
            with telemetry.stream_message_span(METHOD, message.traceparent):
                async with asyncio.timeout(message.timeout_ms / 1000):  # no task of its own
                    response = await self._send.send(request, peer_address)
            answers.put_nowait(broker_pb2.SendStreamResponse(id=message.id, response=response))
        except TimeoutError:
            answers.put_nowait(
                refusal(
                    message.id,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"deadline of {message.timeout_ms} ms passed before the send ended",
                )
            )
        except ServiceError as exc:
            if exc.code not in CALLER_MISTAKES:
                log.warning("SendStream message %d failed: %s", message.id, exc)
            answers.put_nowait(refusal(message.id, exc.code, str(exc)))
        except Exception as exc:  # a bug: that send fails, the stream goes on
            log.exception("SendStream message %d failed", message.id)
            answers.put_nowait(
                refusal(message.id, grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            )
