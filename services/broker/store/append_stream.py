"""AppendStream: the broker's appends to its store over one long-lived bidi stream.

A unary gRPC call costs a Python server about twice what one message on an
open stream does (``bench/grpc_floor.py``, bench/RESULTS.md), and a
synchronous send pays it on every append. So the broker keeps one
``StoreService/AppendStream`` call open and multiplexes every append on it:

- each request gets the next id; a future per id waits for the response with
  that id (the store answers in completion order, so a SYNC_FLUSH append
  waiting for its fsync holds back no other);
- one writer task per call writes the requests in turn (grpc allows one
  outstanding write per call), so an append whose caller is cancelled (its
  client's deadline passed) never cancels a write half-way: grpc answers that
  by cancelling the whole call, which failed every other append on it. A
  request whose caller gave up before its turn is not sent (nothing stored
  for a send nobody waits on); one reader task resolves the futures;
- the appends of concurrent sends that queued while a write was in flight
  leave together in the next stream message (the first, the others in its
  ``more``, up to ``COALESCE_MAX_BYTES``), so many sends cost the stream one
  message, as natural batching does in the SDK; the store answers them in one
  message too when it answers them at once (its ``more``);
- an append answered with an error code raises what the unary call would
  have raised (the caller's ``translate_status``);
- when the call breaks (store restart, network), every append waiting on it
  fails with the store's error, and the next append opens a new call: no
  retry here, the same as a failed unary call;
- each append is bounded by the call deadline the unary calls use.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc

from boltmq.v1 import store_pb2

log = logging.getLogger(__name__)

METHOD = "AppendStream"
Translate = Callable[[str, grpc.StatusCode, str], Exception]
"""(method, code, details) -> the caller's named error."""

_CODES = {code.value[0]: code for code in grpc.StatusCode}
COALESCE_MAX_BYTES = 4 * 1024 * 1024
"""Appends join one stream message while it stays under this size (the first always goes)."""


class _OpenCall:
    """One open AppendStream call, its waiting appends, its writer and its reader."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.waiting: dict[int, asyncio.Future[store_pb2.AppendStreamResponse]] = {}
        self.outbox: asyncio.Queue[store_pb2.AppendStreamRequest] = asyncio.Queue()
        self.held: store_pb2.AppendStreamRequest | None = None
        """A request taken from the outbox that did not fit the last stream message."""
        self.broken = False
        self.reader: asyncio.Task[None] | None = None
        self.writer: asyncio.Task[None] | None = None


class AppendStream:
    """Appends multiplexed on one AppendStream call (see the module docstring)."""

    def __init__(
        self, open_call: Callable[[], Any], timeout_s: float, translate: Translate
    ) -> None:
        self._open_call = open_call
        self._timeout_s = timeout_s
        self._translate = translate
        self._ids = itertools.count(1)
        self._open: _OpenCall | None = None
        self.written = (0, 0)
        """(stream messages, appends) written so far: their ratio is the coalescing."""

    async def append(self, request: store_pb2.AppendRequest) -> store_pb2.AppendResponse:
        """The store's answer to one append; the caller's named error when it failed."""
        opened = self._current()
        request_id = next(self._ids)
        answered = asyncio.get_running_loop().create_future()
        opened.waiting[request_id] = answered
        opened.outbox.put_nowait(store_pb2.AppendStreamRequest(id=request_id, append=request))
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await answered  # a broken call fails it (_break)
        except TimeoutError:
            raise self._translate(
                METHOD, grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {self._timeout_s:g} s"
            ) from None
        finally:
            opened.waiting.pop(request_id, None)
        return appended(response, self._translate)

    async def close(self) -> None:
        """Cancel the open call; appends waiting on it fail."""
        opened, self._open = self._open, None
        if opened is not None:
            self._break(opened)
            await asyncio.gather(
                *(task for task in (opened.writer, opened.reader) if task), return_exceptions=True
            )

    def _current(self) -> _OpenCall:
        opened = self._open
        if opened is None or opened.broken:
            opened = self._open = _OpenCall(self._open_call())
            opened.writer = asyncio.create_task(self._write(opened), name="append-writer")
            opened.reader = asyncio.create_task(self._read(opened), name="append-stream")
        return opened

    async def _write(self, opened: _OpenCall) -> None:
        """Write each request in turn until the call breaks (``_break`` cancels this task)."""
        try:
            while True:
                message = await self._next_message(opened)
                if message is not None:
                    await opened.call.write(message)
                    messages, appends = self.written
                    self.written = (messages + 1, appends + 1 + len(message.more))
        except Exception as exc:  # grpc's error types differ by where the call died
            # The write found the call broken or closed (grpc reports a write racing
            # the call's end as INTERNAL): the stream is gone, the store unreachable.
            details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            self._break(
                opened, (grpc.StatusCode.UNAVAILABLE, f"the append stream broke: {details}")
            )

    @staticmethod
    async def _next_message(opened: _OpenCall) -> store_pb2.AppendStreamRequest | None:
        """The next stream message: the first live request, with the live ones queued
        behind it in ``more`` while they fit; None when every request taken was given up
        by its caller (nothing is sent for those)."""
        first, opened.held = opened.held or await opened.outbox.get(), None
        if first.id not in opened.waiting:
            return None
        size = first.ByteSize()
        while not opened.outbox.empty():
            request = opened.outbox.get_nowait()
            if request.id not in opened.waiting:
                continue
            size += request.ByteSize()
            if size > COALESCE_MAX_BYTES:
                opened.held = request  # the first of the next message
                break
            first.more.append(request)
        return first

    async def _read(self, opened: _OpenCall) -> None:
        code, details = grpc.StatusCode.UNAVAILABLE, "the store ended the stream"
        try:
            while True:
                response = await opened.call.read()
                if response is grpc.aio.EOF:
                    break
                for answer in (response, *response.more):
                    answered = opened.waiting.get(answer.id)
                    if answered is not None and not answered.done():
                        answered.set_result(answer)
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.CANCELLED, "the append stream was closed"
        except Exception as exc:  # grpc's error types differ by where the call died
            details = f"the append stream broke: {exc}"
        self._break(opened, (code, details))

    def _break(self, opened: _OpenCall, failure: tuple[grpc.StatusCode, str] | None = None) -> None:
        """Mark the call broken (the next append opens another); fail what waits on it.

        Each waiting append gets its own error. One whose caller is gone
        (cancelled meanwhile) is marked retrieved, so asyncio does not log it.
        """
        if not opened.broken:
            opened.broken = True
            opened.call.cancel()
            if opened.writer is not None and opened.writer is not asyncio.current_task():
                opened.writer.cancel()
        if failure is None:
            return
        for answered in opened.waiting.values():
            if not answered.done():
                answered.set_exception(self._translate(METHOD, *failure))
                answered.add_done_callback(_retrieved)


def appended(
    response: store_pb2.AppendStreamResponse, translate: Translate, method: str = METHOD
) -> store_pb2.AppendResponse:
    """An append's answer; the caller's named error when the store refused it."""
    if response.error_code:
        code = _CODES.get(response.error_code, grpc.StatusCode.UNKNOWN)
        raise translate(method, code, response.error)
    return response.append


def _retrieved(future: asyncio.Future[Any]) -> None:
    future.exception()
