"""CallerLimits: per-caller request rate and in-flight caps (RESOURCE_EXHAUSTED beyond).

Every service limits each of its callers with one of these: the broker per
client (:mod:`services.broker.access.gate`), the store, HA service and
registry per caller (:mod:`boltmq.kernel.caller_gate`).

Each caller has a token bucket (``rate_per_s`` tokens a second, up to
``burst`` saved) and a count of its calls in flight, open streams and parked
long polls included. A call takes one token and one in-flight slot, or is
refused at once: a flood from one caller then costs the server one
dictionary look-up per call, and every other caller keeps its own budget.
Queuing the excess was rejected: a queue is memory the flooder controls.

A caller is a key the server chose: an identity nobody can forge (an access
key, a component certificate's identity) when there is one, else the peer's
IP address (:func:`peer_host`), so callers behind one NAT or proxy share a
budget. The table holds at most ``clients_max`` idle buckets; past it, full
buckets of callers with nothing in flight are dropped (they would start full
again anyway).

A refusal names the limit by its setting, ``<prefix>_in_flight_max`` or
``<prefix>_request_rate_per_s`` (``prefix``: ``client`` on the broker,
``caller`` elsewhere), so an operator knows which one to raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

CLIENTS_MAX = 100_000
"""Callers tracked at once before idle ones are forgotten."""
REPORT_INTERVAL_S = 10.0
"""A caller refused for its limits is reported (logged) at most once per interval."""
REPORTED_MAX = 10_000
"""Callers whose last report is remembered; past it the memory starts over."""


def peer_host(peer: str) -> str:
    """``ipv4:1.2.3.4:5`` -> ``1.2.3.4``; ``ipv6:[::1]:5`` -> ``[::1]``; else ``peer``."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return address.rpartition(":")[0]
    return peer


@dataclass
class _Bucket:
    tokens: float
    updated_s: float
    in_flight: int = 0


class CallerLimits:
    """Token buckets and in-flight counts by caller key."""

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        in_flight_max: int,
        clock_s: Callable[[], float] = time.monotonic,
        clients_max: int = CLIENTS_MAX,
        settings_prefix: str = "client",
    ) -> None:
        self.rate_per_s = rate_per_s
        """Tokens added per second (0: no rate limit)."""
        self.burst = burst
        self.in_flight_max = in_flight_max
        """Calls in flight per caller at most (0: no limit)."""
        self._clock_s = clock_s
        self._clients_max = clients_max
        self._prefix = settings_prefix
        self._buckets: dict[str, _Bucket] = {}
        self._reported: dict[str, float] = {}

    def acquire(self, key: str) -> str:
        """Take a token and a slot for ``key``; "" when granted, else which limit and why."""
        now = self._clock_s()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._clients_max:
                self._forget_idle(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        if self.in_flight_max and bucket.in_flight >= self.in_flight_max:
            return (
                f"more than {self.in_flight_max} calls in flight at once "
                f"({self._prefix}_in_flight_max)"
            )
        if self.rate_per_s:
            bucket.tokens = min(
                float(self.burst), bucket.tokens + (now - bucket.updated_s) * self.rate_per_s
            )
            bucket.updated_s = now
            if bucket.tokens < 1:
                return (
                    f"more than {self.rate_per_s:g} calls a second "
                    f"({self._prefix}_request_rate_per_s, burst {self.burst})"
                )
            bucket.tokens -= 1
        bucket.in_flight += 1
        return ""

    def release(self, key: str) -> None:
        """A call granted by :meth:`acquire` has ended."""
        bucket = self._buckets.get(key)
        if bucket is not None and bucket.in_flight > 0:
            bucket.in_flight -= 1

    def should_report(self, key: str) -> bool:
        """True for ``key``'s first refusal in :data:`REPORT_INTERVAL_S` (a flood is many)."""
        now = self._clock_s()
        if now - self._reported.get(key, now - REPORT_INTERVAL_S) < REPORT_INTERVAL_S:
            return False
        if len(self._reported) > REPORTED_MAX:
            self._reported.clear()
        self._reported[key] = now
        return True

    def _forget_idle(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            refilled = bucket.tokens + (now - bucket.updated_s) * self.rate_per_s
            if bucket.in_flight == 0 and (not self.rate_per_s or refilled >= self.burst):
                del self._buckets[key]
