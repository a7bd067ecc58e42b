"""OffsetGate: callers wait until a rising offset passes theirs.

Two waits in the store have this shape: group commit (an append waits until
the flushed offset passes its end) and SYNC_MASTER replication (an append
waits until a replica's acked offset passes its end). One gate serves both.

Waiters come in two kinds:

- threads (:meth:`OffsetGate.wait`): one lock per waiter, released by the
  thread that advances the offset. A woken writer needs only the GIL; a
  shared ``Condition`` made every woken writer queue again on the
  condition's lock (measured: a lock convoy that halved group-commit
  throughput).
- asyncio tasks (:meth:`OffsetGate.wait_async`): one future per waiter, and
  one ``call_soon_threadsafe`` per loop per advance, so a round that releases
  many tasks of one loop costs that loop one wake-up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

_AsyncWaiter = tuple[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class OffsetGate:
    """A monotonically rising offset that threads and tasks can wait on.

    ``on_wait`` runs (outside the gate's lock) whenever a waiter registers:
    the flusher uses it to start a flush round at once.
    """

    def __init__(self, offset: int = 0, on_wait: Callable[[], None] | None = None) -> None:
        self.offset = offset
        self._on_wait = on_wait
        self._lock = threading.Lock()
        self._waiters: list[tuple[int, threading.Lock]] = []
        self._async_waiters: list[_AsyncWaiter] = []
        self._closed = False

    def reset(self, offset: int) -> None:
        """Start again at ``offset`` (no waiter may be pending)."""
        with self._lock:
            self.offset = offset
            self._closed = False

    def wait(self, end_offset: int, timeout_s: float) -> bool:
        """Block until the offset reaches ``end_offset``; False on timeout or close."""
        if self.offset >= end_offset:
            return True
        gate = threading.Lock()
        gate.acquire()
        with self._lock:
            if self.offset >= end_offset or self._closed:
                return self.offset >= end_offset
            self._waiters.append((end_offset, gate))
        if self._on_wait is not None:
            self._on_wait()
        if gate.acquire(timeout=max(timeout_s, 0.0)):
            return self.offset >= end_offset
        with self._lock:
            try:
                self._waiters.remove((end_offset, gate))
            except ValueError:
                pass  # released at the same moment
        return self.offset >= end_offset

    async def wait_async(self, end_offset: int, timeout_s: float) -> bool:
        """The asyncio flavour of :meth:`wait`: the loop is never blocked."""
        if self.offset >= end_offset:
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (end_offset, (loop, future))
        with self._lock:
            if self.offset >= end_offset or self._closed:
                return self.offset >= end_offset
            self._async_waiters.append(entry)
        if self._on_wait is not None:
            self._on_wait()
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await asyncio.shield(future)
        except TimeoutError:
            with self._lock:
                if entry in self._async_waiters:
                    self._async_waiters.remove(entry)
        return self.offset >= end_offset

    def advance(self, offset: int) -> None:
        """Raise the offset to ``offset`` (never lowers it) and release who it satisfies."""
        self._release(offset, release_all=False)

    def close(self) -> None:
        """Release every waiter now (they see whether their offset was reached)."""
        self._release(self.offset, release_all=True)
        self._closed = True

    def _release(self, offset: int, release_all: bool) -> None:
        with self._lock:
            self.offset = max(self.offset, offset)
            reached = self.offset
            keep = []
            for end_offset, gate in self._waiters:
                if end_offset <= reached or release_all:
                    gate.release()
                else:
                    keep.append((end_offset, gate))
            self._waiters = keep
            if not self._async_waiters:
                return
            ready: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            keep_async = []
            for end_offset, (loop, future) in self._async_waiters:
                if end_offset <= reached or release_all:
                    ready.setdefault(loop, []).append(future)
                else:
                    keep_async.append((end_offset, (loop, future)))
            self._async_waiters = keep_async
        for loop, futures in ready.items():
            try:
                loop.call_soon_threadsafe(_resolve, futures)
            except RuntimeError:
                pass  # the loop is closed: nobody is waiting any more
