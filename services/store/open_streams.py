"""OpenStreams: the endless streams of one servicer, so that shutdown ends each by itself.

WatchArrivals, WatchQueues and a following ReadCommitLog wait on an event;
AppendStream and AppendRawStream read requests for as long as the client
sends them. A stream left open would hold the server's whole grace period,
so at shutdown (:meth:`OpenStreams.end`) every waiting stream is woken and
sees ``closing`` (it ends normally; clients reconnect), and every reading
stream stops reading: a handler waiting for its next request is cancelled
there (and only there, :meth:`OpenStreams.each`); what it already took is
still answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class OpenStreams:
    """The events the waiting streams wait on and the tasks of the reading ones."""

    def __init__(self) -> None:
        self.closing = False
        """Set by :meth:`end`: a woken stream ends instead of waiting again."""
        self._events: set[asyncio.Event] = set()
        self._readers: set[asyncio.Task[Any]] = set()

    @contextlib.contextmanager
    def waking(self, event: asyncio.Event) -> Iterator[None]:
        """Within the block, :meth:`end` sets ``event``."""
        self._events.add(event)
        try:
            yield
        finally:
            self._events.discard(event)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Within the block, :meth:`end` cancels the current task (a stream's handler):
        the replicas' AppendRawStream, whose appends run in a thread that a cancel does
        not stop. AppendStream uses :meth:`each`."""
        handler = asyncio.current_task()
        assert handler is not None
        self._readers.add(handler)
        try:
            yield
        finally:
            self._readers.discard(handler)

    async def each(self, requests: AsyncIterator[T]) -> AsyncIterator[T]:
        """The requests of a reading stream, until its client ends it or shutdown
        begins. :meth:`end` interrupts only the wait for the next request, never the
        handling of one already read: a cancellation inside the handler's own awaits
        (an append in a thread, a ``context.write``) would leave an operation of the
        call in flight, and gRPC could then not end the call (it fails the status
        with TOO_MANY_OPERATIONS and the call holds the grace period)."""
        handler = asyncio.current_task()
        assert handler is not None
        iterator = aiter(requests)
        while not self.closing:
            self._readers.add(handler)
            try:
                request = await anext(iterator)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if not self.closing:
                    raise  # the call itself was cancelled
                handler.uncancel()  # our own cancel: end normally
                return
            finally:
                self._readers.discard(handler)
            yield request

    def end(self) -> None:
        """End every open stream (shutdown)."""
        self.closing = True
        for event in list(self._events):
            event.set()
        for handler in list(self._readers):
            handler.cancel()
