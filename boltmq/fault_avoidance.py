"""FaultAvoidance: the broker groups a producer skips for a while after a send failed there.

RocketMQ's latency fault tolerance, keyed by broker group (broker name): a send
that failed in a way that says the group cannot take it now (UNAVAILABLE,
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, or the store's SERVICE_NOT_AVAILABLE)
marks the group avoided for ``avoid_ms`` (:attr:`ProducerOptions.fault_avoidance_ms`);
a later success there clears the mark. The producer's round-robin then takes
the next queue of a group that is not avoided, and only when every group of
the topic is avoided the one whose mark ends first, so a whole-cluster outage
still tries somewhere.

Sharded sends (a ``sharding_key``: one key's messages in one queue, in order)
never consult the table: moving a key to another group's queue would reorder
it, so such a send fails instead (:mod:`boltmq.producer`).

Time comes from an injected monotonic clock (seconds), so tests move it by
hand. Thread-safe: async and sync sends of one producer share one table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

Clock = Callable[[], float]
"""Monotonic seconds."""
T = TypeVar("T")


class FaultAvoidance:
    """Broker name -> monotonic time until which sends avoid that group."""

    def __init__(self, avoid_ms: int, clock: Clock = time.monotonic) -> None:
        if type(avoid_ms) is not int or avoid_ms < 0:
            raise ValueError(f"avoid_ms must be an int >= 0, not {avoid_ms!r}")
        self.avoid_s = avoid_ms / 1000
        self._clock = clock
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def failed(self, broker_name: str) -> None:
        """A send to ``broker_name`` failed: avoid it for ``avoid_ms`` from now (0: never)."""
        if not self.avoid_s:
            return
        with self._lock:
            self._until[broker_name] = self._clock() + self.avoid_s

    def succeeded(self, broker_name: str) -> None:
        """A send to ``broker_name`` succeeded: stop avoiding it."""
        if self._until:
            with self._lock:
                self._until.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        """True unless ``broker_name`` failed less than ``avoid_ms`` ago."""
        if not self._until:
            return True
        with self._lock:
            until = self._until.get(broker_name)
            if until is None:
                return True
            if self._clock() >= until:
                del self._until[broker_name]  # expired: forgotten
                return True
            return False

    @property
    def avoiding(self) -> bool:
        """Whether any group is marked (expired marks included, until next looked at)."""
        return bool(self._until)

    def avoided(self) -> list[str]:
        """The groups avoided now, sorted."""
        now = self._clock()
        with self._lock:
            return sorted(name for name, until in self._until.items() if now < until)

    def order(self, candidates: Sequence[T], broker_of: Callable[[T], str]) -> list[T]:
        """``candidates`` (in their order) on available groups first, then the avoided
        ones, soonest-ending mark first (each group's queues keep their order)."""
        if not self._until:  # the usual case: nothing failed lately
            return list(candidates)
        available = [c for c in candidates if self.available(broker_of(c))]
        if len(available) == len(candidates):
            return list(candidates)
        with self._lock:
            until = dict(self._until)
        rest = [c for c in candidates if not self.available(broker_of(c))]
        rest.sort(key=lambda c: until.get(broker_of(c), 0.0))  # stable: queue order kept
        return available + rest
