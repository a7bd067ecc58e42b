"""Arrival streams: WatchArrivals and WatchQueues, and the listeners that feed them.

Arrivals come from the store's dispatcher as ``(topic, queue_id, max_offset)``
on a store thread. Each stream registers its own listener and removes it
when the stream ends; the listener only records the arrival under a lock
and wakes the stream's loop with ``call_soon_threadsafe`` once per batch, so
a fast producer costs a stream one dictionary entry per queue, never a
growing queue.

- WatchArrivals (:class:`ArrivalQueue`): every arrival, coalesced per queue.
  At most ``arrival_watch_queue_max`` queues may wait unread; one more ends
  the stream with RESOURCE_EXHAUSTED (the client re-subscribes and re-reads
  queue ranges) rather than silently dropping a wake-up a long poll waits for.
- WatchQueues (:class:`InterestQueue`): one arrival per interest the client
  names, on the queues it names.
- A following ReadCommitLog (:mod:`services.store.replication`) is woken by
  any arrival (:class:`Waker`).

Initial metadata (:data:`WATCHING_METADATA`) is sent once a stream's listener
is registered: a client that waits for it knows every later arrival reaches
it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Final

import grpc

from boltmq.kernel.errors import ServiceError
from boltmq.v1 import store_pb2
from services.store.config import StoreConfig
from services.store.errors import Rejected
from services.store.open_streams import OpenStreams
from services.store.request_checks import interest_fields, running_store
from services.store.store import MessageStore

WATCHING_METADATA: Final = (("boltmq-watching", "1"),)
"""Initial metadata of WatchArrivals, sent once the stream's listener is registered:
a client that waits for it knows every later arrival reaches it."""


class ArrivalQueue:
    """One WatchArrivals stream's pending arrivals, coalesced per (topic, queue).

    ``offer`` runs on a store thread; ``take`` on the stream's loop. At most
    ``limit`` queues are pending; one more sets ``overflowed`` and the stream
    ends (the client re-subscribes and re-reads queue ranges) rather than
    silently dropping a wake-up a long poll is waiting for.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._loop = loop
        self._limit = max(1, limit)
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], int] = {}
        self._scheduled = False
        self.event = asyncio.Event()
        self.overflowed = False

    def offer(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Record an arrival (store thread); wakes the loop once per batch taken."""
        key = (topic, queue_id)
        with self._lock:
            pending = self._pending
            if key in pending:
                if max_offset > pending[key]:
                    pending[key] = max_offset
            elif len(pending) < self._limit:
                pending[key] = max_offset
            else:
                self.overflowed = True
            if self._scheduled:
                return
            self._scheduled = True
        _call_soon(self._loop, self.event.set)

    async def take(self) -> dict[tuple[str, int], int] | None:
        """The arrivals since the last take (waits for one); None once overflowed."""
        await self.event.wait()
        with self._lock:
            batch, self._pending = self._pending, {}
            self._scheduled = False
            self.event.clear()
            return None if self.overflowed else batch


class InterestQueue(ArrivalQueue):
    """An :class:`ArrivalQueue` that keeps only arrivals on queues a client waits on.

    :meth:`want` names a queue (loop thread); the next arrival on it is kept
    and the queue forgotten (one arrival per interest). Every other arrival
    returns after one set lookup. The client's re-check closes the race with
    an arrival just before :meth:`want`: the queue is named first, its max
    offset read after, so an arrival is either kept or already visible.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        super().__init__(loop, limit)
        self._wanted: set[tuple[str, int]] = set()

    def want(self, topic: str, queue_id: int) -> None:
        """Keep the next arrival on this queue."""
        self._wanted.add((topic, queue_id))

    def offer(self, topic: str, queue_id: int, max_offset: int) -> None:
        key = (topic, queue_id)
        if key not in self._wanted:
            return
        self._wanted.discard(key)
        super().offer(topic, queue_id, max_offset)


class Waker:
    """Wakes a following ReadCommitLog on any arrival; offers between waits coalesce."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.event = asyncio.Event()
        self._armed = True

    def offer(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Any arrival (store thread)."""
        # No lock: a lost race only schedules a second, harmless set(), and an
        # offer that sees the flag down came before clear(), so its bytes are
        # already visible to the read that follows clear().
        if self._armed:
            self._armed = False
            _call_soon(self._loop, self.event.set)

    def clear(self) -> None:
        """Re-arm before reading: an arrival after this point ends the next wait."""
        self._armed = True
        self.event.clear()

    async def wait(self, timeout_s: float) -> None:
        """Until an arrival since :meth:`clear`, or ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.event.wait()
        except TimeoutError:
            pass


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:
        pass  # the stream's loop is closed: nobody is waiting any more


class ArrivalStreams:
    """WatchArrivals and WatchQueues over one store (the servicer delegates both)."""

    def __init__(self, store: MessageStore, config: StoreConfig, streams: OpenStreams) -> None:
        self._store = store
        self._config = config
        self._streams = streams

    async def watch_arrivals(
        self, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Arrival]:
        """``(topic, queue, max offset)`` after each dispatch, coalesced per queue.

        Initial metadata (``WATCHING_METADATA``) is sent once the listener is
        registered; RESOURCE_EXHAUSTED ends a stream whose client fell more
        than ``arrival_watch_queue_max`` queues behind.
        """
        store = running_store(self._store)
        arrivals = ArrivalQueue(asyncio.get_running_loop(), self._config.arrival_watch_queue_max)
        async for arrival in self._arrival_stream(store, arrivals, context, []):
            yield arrival

    async def watch_queues(
        self, requests: AsyncIterator[store_pb2.QueueInterest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Arrival]:
        """Arrivals on the queues the client names, one per interest (see store.proto).

        A message names its queue and those in ``more``. A malformed interest
        (a bad topic or queue id, a negative offset, a ``more`` inside ``more``)
        ends the stream with INVALID_ARGUMENT naming the field.
        """
        store = running_store(self._store)
        arrivals = InterestQueue(asyncio.get_running_loop(), self._config.arrival_watch_queue_max)
        refused: list[Exception] = []
        reader = asyncio.create_task(self._read_interests(store, requests, arrivals, refused))
        try:
            async for arrival in self._arrival_stream(store, arrivals, context, refused):
                yield arrival
        finally:
            reader.cancel()

    async def _read_interests(
        self,
        store: MessageStore,
        requests: AsyncIterator[store_pb2.QueueInterest],
        arrivals: InterestQueue,
        refused: list[Exception],
    ) -> None:
        """Name each interest's queue in ``arrivals``; a refusal goes to ``refused``."""
        max_queue_id = self._config.max_queue_id
        try:
            async for request in requests:
                for n, interest in enumerate((request, *request.more)):
                    topic, queue_id, after = interest_fields(n, interest, max_queue_id)
                    arrivals.want(topic, queue_id)  # named first, then the offset read
                    max_offset = store.max_offset(topic, queue_id)
                    if max_offset > after:
                        arrivals.offer(topic, queue_id, max_offset)
        except ServiceError as exc:  # a bad interest, or the store stopping
            refused.append(exc)
            arrivals.event.set()

    async def _arrival_stream(
        self,
        store: MessageStore,
        arrivals: ArrivalQueue,
        context: grpc.aio.ServicerContext,
        refused: list[Exception],
    ) -> AsyncIterator[store_pb2.Arrival]:
        """What an arrival stream sends: ``arrivals`` listening to ``store`` until the
        client leaves, shutdown, an overflow, or a refusal put in ``refused``."""
        listener = arrivals.offer  # one bound method: removal is by identity
        store.add_arrival_listener(listener)
        try:
            with self._streams.waking(arrivals.event):
                await context.send_initial_metadata(WATCHING_METADATA)
                while True:
                    batch = await arrivals.take()
                    if refused:
                        raise refused[0]
                    if self._streams.closing:
                        return
                    if batch is None:
                        raise Rejected(
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"more than {self._config.arrival_watch_queue_max} queues "
                            f"with unread arrivals; re-subscribe and re-read queue ranges",
                        )
                    for (topic, queue_id), max_offset in batch.items():
                        yield store_pb2.Arrival(
                            topic=topic, queue_id=queue_id, max_offset=max_offset
                        )
        finally:
            store.remove_arrival_listener(listener)
