"""ClientLimits: per-client request rate and in-flight caps (RESOURCE_EXHAUSTED beyond).

Each client has a token bucket (``rate_per_s`` tokens a second, up to
``burst`` saved) and a count of its calls in flight, parked long polls
included. A call takes one token and one in-flight slot, or is refused at
once: a flood from one client then costs the broker one dictionary look-up
per call, and every other client keeps its own budget. Queuing the excess
was rejected: a queue is memory the flooder controls.

A client is its access key when access control is on (it cannot be forged
without the secret), else its IP address: clients behind one NAT or proxy
share a budget then. The table holds at most ``clients_max`` idle buckets;
past it, full buckets of clients with nothing in flight are dropped (they
would start full again anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

CLIENTS_MAX = 100_000
"""Clients tracked at once before idle ones are forgotten."""


@dataclass
class _Bucket:
    tokens: float
    updated_s: float
    in_flight: int = 0


class ClientLimits:
    """Token buckets and in-flight counts by client key."""

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        in_flight_max: int,
        clock_s: Callable[[], float] = time.monotonic,
        clients_max: int = CLIENTS_MAX,
    ) -> None:
        self.rate_per_s = rate_per_s
        """Tokens added per second (0: no rate limit)."""
        self.burst = burst
        self.in_flight_max = in_flight_max
        """Calls in flight per client at most (0: no limit)."""
        self._clock_s = clock_s
        self._clients_max = clients_max
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, key: str) -> str:
        """Take a token and a slot for ``key``; "" when granted, else why not."""
        now = self._clock_s()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._clients_max:
                self._forget_idle(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        if self.in_flight_max and bucket.in_flight >= self.in_flight_max:
            return f"more than {self.in_flight_max} calls in flight"
        if self.rate_per_s:
            bucket.tokens = min(
                float(self.burst), bucket.tokens + (now - bucket.updated_s) * self.rate_per_s
            )
            bucket.updated_s = now
            if bucket.tokens < 1:
                return f"more than {self.rate_per_s:g} calls a second (burst {self.burst})"
            bucket.tokens -= 1
        bucket.in_flight += 1
        return ""

    def release(self, key: str) -> None:
        """A call granted by :meth:`acquire` has ended."""
        bucket = self._buckets.get(key)
        if bucket is not None and bucket.in_flight > 0:
            bucket.in_flight -= 1

    def _forget_idle(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            refilled = bucket.tokens + (now - bucket.updated_s) * self.rate_per_s
            if bucket.in_flight == 0 and (not self.rate_per_s or refilled >= self.burst):
                del self._buckets[key]
