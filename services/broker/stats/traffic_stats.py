"""Messages produced per topic and consumed per group and topic, over the last minute and
hour (RocketMQ's ``statsAll``; ``boltmq admin stats topic|group``).

:class:`services.broker.metrics.BrokerMetrics` feeds it the counts its Prometheus
counters add: messages stored per send request (``boltmq.broker.in.messages``)
and messages returned per answered pull (``boltmq.broker.out.messages``), the
latter also per consumer group. Each (topic) and (group, topic) has its own
:class:`services.broker.stats.rolling_counter.RollingCounter`; a topic's consumed
count is the sum over its groups, a group's over its topics. Counters idle for
over an hour are dropped (checked at most once a minute, as counts arrive), so
memory follows the topics and groups in use. Time comes from an injected
millisecond clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from services.broker.metadata.clock import Clock, monotonic_ms
from services.broker.stats.rolling_counter import MINUTE_MS, RollingCounter

K = TypeVar("K")

IDLE_MS = 61 * MINUTE_MS
"""A counter this long without a count is dropped (it counts 0 over the last hour)."""


@dataclass(frozen=True, slots=True)
class Counts:
    """Messages over the last minute and the last hour."""

    last_minute: int = 0
    last_hour: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.last_minute + other.last_minute, self.last_hour + other.last_hour)


@dataclass(frozen=True, slots=True)
class Traffic:
    """A topic's (or group's) traffic: ``produced`` (topics only), ``consumed`` in all,
    and ``consumed`` per group of the topic (per topic of the group), sorted by name."""

    produced: Counts
    consumed: Counts
    parts: tuple[tuple[str, Counts], ...]


class TrafficStats:
    """Rolling produce and consume counts of this broker."""

    def __init__(self, clock_ms: Clock = monotonic_ms) -> None:
        self._clock_ms = clock_ms
        self._produced: dict[str, RollingCounter] = {}
        self._consumed: dict[tuple[str, str], RollingCounter] = {}
        """(group, topic) -> messages its pulls returned."""
        self._pruned_ms = clock_ms()

    def produced(self, topic: str, count: int) -> None:
        """``count`` messages of ``topic`` stored."""
        self._add(self._produced, topic, count)

    def produced_each(self, counts: Iterable[tuple[str, int]]) -> None:
        """:meth:`produced` of each ``(topic, count)``, at one reading of the clock."""
        now = self._clock_ms()
        for topic, count in counts:
            self._add(self._produced, topic, count, now)

    def consumed(self, group: str, topic: str, count: int) -> None:
        """``count`` messages of ``topic`` returned to a pull of ``group``."""
        self._add(self._consumed, (group, topic), count)

    def knows_topic(self, topic: str) -> bool:
        """Whether any count of ``topic`` is kept."""
        return topic in self._produced or any(t == topic for _, t in self._consumed)

    def knows_group(self, group: str) -> bool:
        """Whether any count of ``group`` is kept."""
        return any(g == group for g, _ in self._consumed)

    def topic(self, topic: str) -> Traffic:
        """``topic``'s messages produced, consumed, and consumed per group."""
        now = self._clock_ms()
        counter = self._produced.get(topic)
        produced = Counts() if counter is None else _counts(counter, now)
        parts = sorted((g, _counts(c, now)) for (g, t), c in self._consumed.items() if t == topic)
        return Traffic(produced, _sum(parts), tuple(parts))

    def group(self, group: str) -> Traffic:
        """``group``'s messages consumed, and consumed per topic (nothing produced)."""
        now = self._clock_ms()
        parts = sorted((t, _counts(c, now)) for (g, t), c in self._consumed.items() if g == group)
        return Traffic(Counts(), _sum(parts), tuple(parts))

    def everything(self, counted: Callable[[str], bool]) -> Traffic:
        """Messages produced and consumed over the topics ``counted`` keeps, with each such
        topic's consumed count as a part (the topics with traffic in the last hour only)."""
        now = self._clock_ms()
        produced = Counts()
        for topic, counter in self._produced.items():
            if counted(topic):
                produced += _counts(counter, now)
        per_topic: dict[str, Counts] = {}
        for (_, topic), counter in self._consumed.items():
            if counted(topic):
                per_topic[topic] = per_topic.get(topic, Counts()) + _counts(counter, now)
        parts = sorted(per_topic.items())
        return Traffic(produced, _sum(parts), tuple(parts))

    def _add(
        self, counters: dict[K, RollingCounter], key: K, count: int, now: int | None = None
    ) -> None:
        if count <= 0:
            return
        if now is None:
            now = self._clock_ms()
        counter = counters.get(key)
        if counter is None:
            counter = counters[key] = RollingCounter()
        counter.add(count, now)
        if now - self._pruned_ms >= MINUTE_MS:
            self._pruned_ms = now
            _drop_idle(self._produced, now)
            _drop_idle(self._consumed, now)


def _drop_idle(counters: dict[K, RollingCounter], now_ms: int) -> None:
    for key in [k for k, c in counters.items() if now_ms - c.last_add_ms > IDLE_MS]:
        del counters[key]


def _counts(counter: RollingCounter, now_ms: int) -> Counts:
    return Counts(counter.last_minute(now_ms), counter.last_hour(now_ms))


def _sum(parts: list[tuple[str, Counts]]) -> Counts:
    total = Counts()
    for _, counts in parts:
        total += counts
    return total
