"""A count over the last minute and the last hour, in fixed memory.

Two rings: 60 one-second buckets and 60 one-minute buckets. Each bucket
remembers which second (minute) it holds; :meth:`RollingCounter.add` puts a
count in the current second's and the current minute's bucket, first clearing
a bucket that still holds an older second (minute). The last minute is the
sum of the second buckets of the 60 seconds ending with the current one; the
last hour that of the minute buckets of the 60 minutes ending with the current
one (so it spans 59 to 60 minutes, as RocketMQ's per-minute snapshots do).
Time is a millisecond clock passed in by the caller, so tests drive it.
"""

from __future__ import annotations

SLOTS = 60
"""Buckets of each ring."""
SECOND_MS = 1_000
MINUTE_MS = 60_000


class _Ring:
    """``SLOTS`` buckets of ``width_ms`` each."""

    __slots__ = ("_width_ms", "_ticks", "_counts")

    def __init__(self, width_ms: int) -> None:
        self._width_ms = width_ms
        self._ticks = [-1] * SLOTS
        """Which tick (now_ms // width_ms) each bucket holds; -1: none."""
        self._counts = [0] * SLOTS

    def add(self, count: int, now_ms: int) -> None:
        tick = now_ms // self._width_ms
        slot = tick % SLOTS
        if self._ticks[slot] != tick:
            self._ticks[slot] = tick
            self._counts[slot] = 0
        self._counts[slot] += count

    def total(self, now_ms: int) -> int:
        oldest = now_ms // self._width_ms - SLOTS
        return sum(c for t, c in zip(self._ticks, self._counts, strict=True) if t > oldest)


class RollingCounter:
    """Counts added over time, read back over the last minute and the last hour."""

    __slots__ = ("_seconds", "_minutes", "last_add_ms")

    def __init__(self) -> None:
        self._seconds = _Ring(SECOND_MS)
        self._minutes = _Ring(MINUTE_MS)
        self.last_add_ms = -1
        """When :meth:`add` last ran (-1: never); a counter idle for an hour counts 0."""

    def add(self, count: int, now_ms: int) -> None:
        """Count ``count`` at ``now_ms``."""
        self._seconds.add(count, now_ms)
        self._minutes.add(count, now_ms)
        self.last_add_ms = now_ms

    def last_minute(self, now_ms: int) -> int:
        """What was added in the 60 seconds ending with the current one."""
        return self._seconds.total(now_ms)

    def last_hour(self, now_ms: int) -> int:
        """What was added in the 60 minutes ending with the current one."""
        return self._minutes.total(now_ms)
