"""Queue locks for orderly consumption (RocketMQ's RebalanceLockManager).

An orderly consumer locks each queue it was allocated before consuming it, so
two members of a group never consume one queue at once during a rebalance. A
lock is renewed by locking again; one not renewed for ``expiry_ms`` is free
for any member, which is how a crashed consumer's queues move on. Time comes
from an injected millisecond clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.broker.metadata.clock import Clock, monotonic_ms

QueueKey = tuple[str, int]
"""``(topic, queue_id)``."""


class QueueLockManager:
    """Per group: which client holds which queue, and since when it last renewed."""

    def __init__(self, expiry_ms: int, clock_ms: Clock = monotonic_ms) -> None:
        self._expiry_ms = expiry_ms
        self._clock_ms = clock_ms
        self._locks: dict[str, dict[QueueKey, tuple[str, int]]] = {}
        """group -> queue -> (client id, last renewal)."""

    def try_lock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Lock or renew each free, expired or already-owned queue; return those now held."""
        now = self._clock_ms()
        table = self._locks.setdefault(group, {})
        locked = []
        for queue in queues:
            holder = table.get(queue)
            if holder is None or holder[0] == client_id or self._expired(holder[1], now):
                table[queue] = (client_id, now)
                locked.append(queue)
        return locked

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Release the queues ``client_id`` holds among ``queues``; return those released."""
        table = self._locks.get(group, {})
        released = []
        for queue in queues:
            holder = table.get(queue)
            if holder is not None and holder[0] == client_id:
                del table[queue]
                released.append(queue)
        if not table:
            self._locks.pop(group, None)
        return released

    def unlock_client(self, group: str, client_id: str) -> list[QueueKey]:
        """Release every queue of the group held by ``client_id`` (it left or expired)."""
        held = [q for q, (owner, _) in self._locks.get(group, {}).items() if owner == client_id]
        return self.unlock(group, client_id, held)

    def holder(self, group: str, queue: QueueKey) -> str | None:
        """The client holding a live lock on the queue, or None."""
        entry = self._locks.get(group, {}).get(queue)
        if entry is None or self._expired(entry[1], self._clock_ms()):
            return None
        return entry[0]

    def expire(self) -> int:
        """Drop locks nobody renewed in time (memory only; they were free already)."""
        now = self._clock_ms()
        dropped = 0
        for group in list(self._locks):
            table = self._locks[group]
            for queue in [q for q, (_, renewed) in table.items() if self._expired(renewed, now)]:
                del table[queue]
                dropped += 1
            if not table:
                del self._locks[group]
        return dropped

    def _expired(self, renewed_ms: int, now_ms: int) -> bool:
        return now_ms - renewed_ms > self._expiry_ms
