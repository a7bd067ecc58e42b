"""Keeps one WatchQueues stream open to the store: parked queues out, arrivals in.

The long-poll hub names each queue a pull parks on (its ``on_wait``:
:meth:`QueueInterests.name`); the watcher sends it to the store, which answers
with one arrival on that queue, fed back to :meth:`LongPollHub.notify`. Queues
nobody waits on cost the store and the broker nothing. The hub and the watcher
each need the other, so they share a :class:`QueueInterests`, built first: the
hub names queues into it, the watcher attaches its open stream to it.

When the stream breaks (store restart, network), parked pulls are woken to
pull again, since arrivals may be missed while it is down, and the stream
is reopened after a pause that doubles up to ``reconnect_max_ms``. The pause
is a reconnect backoff for one stream, not a poll of the queues.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from boltmq.kernel import runtime
from boltmq.v1 import store_pb2
from services.broker.arrivals.long_poll import LongPollHub
from services.broker.errors import BrokerError
from services.broker.store.store_client import StoreClient

log = logging.getLogger(__name__)

RECONNECT_MIN_S = 0.05
"""First pause after the stream breaks."""


class QueueInterests:
    """The queues parked pulls wait on, bound for the store's open WatchQueues stream.

    With no stream open a named queue is dropped: opening one wakes every
    parked pull, and each names its queue again on the new stream.
    """

    def __init__(self) -> None:
        self._stream: asyncio.Queue[store_pb2.QueueInterest] | None = None

    def name(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """A pull now waits on the queue past ``queue_offset`` (the hub's ``on_wait``)."""
        if self._stream is not None:
            self._stream.put_nowait(
                store_pb2.QueueInterest(topic=topic, queue_id=queue_id, after_offset=queue_offset)
            )

    def attach(self, stream: asyncio.Queue[store_pb2.QueueInterest]) -> None:
        """Send what is named from now on down ``stream`` (just opened)."""
        self._stream = stream

    def detach(self) -> bool:
        """The stream closed: drop what is named until the next; whether one was open."""
        was_open, self._stream = self._stream is not None, None
        return was_open


class ArrivalWatcher:
    """A background task: parked queues -> the store; its arrivals -> :meth:`LongPollHub.notify`."""

    def __init__(
        self,
        store: StoreClient,
        hub: LongPollHub,
        interests: QueueInterests,
        reconnect_max_ms: int,
    ) -> None:
        self._store = store
        self._hub = hub
        self._interests = interests
        self._reconnect_max_s = reconnect_max_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        """Set while the stream is open (tests and health wait on it)."""

    def start(self) -> None:
        """Open the stream in the background."""
        self._task = asyncio.create_task(self._run(), name="arrival-watcher")

    async def stop(self) -> None:
        """Close the stream."""
        task, self._task = self._task, None
        await runtime.cancel_and_wait(task)

    def _open(self, interests: asyncio.Queue[store_pb2.QueueInterest]) -> None:
        # Wake everything parked: arrivals before this moment were not seen, and
        # the pulls park again, naming their queues on this stream.
        self._interests.attach(interests)
        self.connected.set()
        self._hub.wake_all()

    async def _run(self) -> None:
        pause_s = RECONNECT_MIN_S
        failures = 0
        while True:
            interests: asyncio.Queue[store_pb2.QueueInterest] = asyncio.Queue()
            reason = "an error, logged above"
            # Without this loop no long poll would be woken by an arrival again.
            with runtime.one_round("arrival stream", log):
                try:
                    async for arrival in self._store.watch_queues(
                        interests, functools.partial(self._open, interests)
                    ):
                        self._hub.notify(arrival.topic, arrival.queue_id, arrival.max_offset)
                    reason = "the store ended the stream"
                except BrokerError as exc:
                    reason = str(exc)
            if self._interests.detach():  # it was open: start the backoff afresh
                pause_s, failures = RECONNECT_MIN_S, 0
            self.connected.clear()
            self._hub.wake_all()
            failures += 1
            if failures == 1 or failures % 100 == 0:
                log.warning(
                    "arrival stream from %s closed (%s); reopening", self._store.address, reason
                )
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, self._reconnect_max_s)
