"""Keeps one WatchArrivals stream open to the store and feeds it to the long-poll hub.

When the stream breaks (store restart, network), parked pulls are woken to
pull again, since arrivals may be missed while it is down, and the stream
is reopened after a pause that doubles up to ``reconnect_max_ms``. The pause
is a reconnect backoff for one stream, not a poll of the queues.
"""

from __future__ import annotations

import asyncio
import logging

from boltmq import runtime
from services.broker.errors import BrokerError
from services.broker.long_poll import LongPollHub
from services.broker.store_client import StoreClient

log = logging.getLogger(__name__)

RECONNECT_MIN_S = 0.05
"""First pause after the stream breaks."""


class ArrivalWatcher:
    """A background task: store arrivals -> :meth:`LongPollHub.notify`."""

    def __init__(self, store: StoreClient, hub: LongPollHub, reconnect_max_ms: int) -> None:
        self._store = store
        self._hub = hub
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

    def _opened(self) -> None:
        # Wake everything parked: arrivals before this moment were not seen.
        self.connected.set()
        self._hub.wake_all()

    async def _run(self) -> None:
        pause_s = RECONNECT_MIN_S
        failures = 0
        while True:
            try:
                async for arrival in self._store.watch_arrivals(self._opened):
                    pause_s, failures = RECONNECT_MIN_S, 0
                    self._hub.notify(arrival.topic, arrival.queue_id, arrival.max_offset)
                reason = "the store ended the stream"
            except BrokerError as exc:
                reason = str(exc)
            self.connected.clear()
            self._hub.wake_all()
            failures += 1
            if failures == 1 or failures % 100 == 0:
                log.warning("arrival stream from %s closed (%s); reopening",
                            self._store.address, reason)
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, self._reconnect_max_s)
