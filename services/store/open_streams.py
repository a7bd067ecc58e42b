"""OpenStreams: the endless streams of one servicer, so that shutdown ends each by itself.

WatchArrivals, WatchQueues and a following ReadCommitLog wait on an event;
AppendStream and AppendRawStream read requests for as long as the client
sends them. A stream left open would hold the server's whole grace period,
so at shutdown (:meth:`OpenStreams.end`) every waiting stream is woken and
sees ``closing`` (it ends normally; clients reconnect), and every reading
stream's handler is cancelled (it stops reading; what it already took is
still answered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any


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
        """Within the block, :meth:`end` cancels the current task (a stream's handler)."""
        handler = asyncio.current_task()
        assert handler is not None
        self._readers.add(handler)
        try:
            yield
        finally:
            self._readers.discard(handler)

    def end(self) -> None:
        """End every open stream (shutdown)."""
        self.closing = True
        for event in list(self._events):
            event.set()
        for handler in list(self._readers):
            handler.cancel()
