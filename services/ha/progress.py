"""Replica progress forwarded to the master's store over one long-lived client stream.

SYNC_MASTER appends wait in the store until a replica has acked past their
end (docs/ha.md, "Durability"), so every ack a Replicate stream receives goes
on to the store through ``ReportReplicas``. Updates coalesce per replica (only
the newest offset matters), which bounds what is pending by the number of
replicas. When the store restarts the stream breaks; it is reopened with
backoff and starts with the current offset of every connected replica, so the
new store process knows them at once. Rejected: one unary call per ack, which
would put a round trip to the store on every replica ack and reorder acks
across calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from boltmq.kernel import runtime
from boltmq.v1 import store_pb2
from services.ha.errors import HAError
from services.ha.store_client import HAStoreClient

log = logging.getLogger(__name__)

REOPEN_MIN_S = 0.1
"""First pause before the stream to the store is reopened; it doubles up to ``REOPEN_MAX_S``."""
REOPEN_MAX_S = 2.0
"""Longest pause between two attempts to reopen the stream."""


class ProgressForwarder:
    """Keeps one ReportReplicas stream open while running and feeds it every ack."""

    def __init__(self, store: HAStoreClient, current: Callable[[], dict[str, int]]) -> None:
        self._store = store
        self._current = current
        """Address -> acked offset of every connected replica (sent first on each stream)."""
        self._pending: dict[str, store_pb2.ReplicaProgress] = {}
        self._wake = asyncio.Event()
        self._closing = False
        self._delivered = False
        """The current stream took at least one message (so the store was reachable)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._task is not None

    def start(self) -> None:
        """Open the stream in the background (idempotent)."""
        if self._task is None:
            self._closing = False
            self._pending.clear()
            self._task = asyncio.create_task(self._run(), name="ha-report-replicas")

    async def stop(self) -> None:
        """End the stream cleanly (the store forgets nothing it was told), then stop."""
        task, self._task = self._task, None
        if task is None:
            return
        self._closing = True
        self._wake.set()
        try:
            async with asyncio.timeout(REOPEN_MAX_S):
                await asyncio.shield(task)
        except (TimeoutError, HAError):
            pass
        finally:
            await runtime.cancel_and_wait(task)

    def acked(self, address: str, offset: int) -> None:
        """A replica's newest acked offset."""
        self._offer(store_pb2.ReplicaProgress(replica_address=address, acked_offset=offset))

    def disconnected(self, address: str) -> None:
        """A replica's stream ended: the store must stop counting on it."""
        self._offer(store_pb2.ReplicaProgress(replica_address=address, disconnected=True))

    def _offer(self, progress: store_pb2.ReplicaProgress) -> None:
        if self._task is None:
            return
        self._pending[progress.replica_address] = progress
        self._wake.set()

    async def _run(self) -> None:
        pause_s = REOPEN_MIN_S
        failing = False
        while not self._closing:
            self._delivered = False
            try:
                await self._store.report_replicas(self._stream())
                return  # ended by stop()
            except asyncio.CancelledError:
                if not runtime.cancelled_from_below():
                    raise
                log.warning("replica progress stream to the store was cancelled; reopening")
                failing = True
            except HAError as exc:
                if self._delivered:
                    pause_s = REOPEN_MIN_S  # it worked for a while: a fresh break
                if self._delivered or not failing:
                    log.warning("replica progress stream to the store broke (%s); reopening", exc)
                failing = True
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, REOPEN_MAX_S)

    async def _stream(self) -> AsyncIterator[store_pb2.ReplicaProgress]:
        for address, offset in sorted(self._current().items()):
            yield store_pb2.ReplicaProgress(replica_address=address, acked_offset=offset)
            self._delivered = True
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            for progress in batch.values():
                yield progress
                self._delivered = True
            if self._closing:
                return
