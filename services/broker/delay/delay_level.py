"""Delay levels: the table of fixed delays a message may ask for (docs/retry-and-delay.md).

``message_delay_level`` is RocketMQ's setting: delays separated by spaces, each a
number with a unit (``ms``, ``s``, ``m``, ``h``, ``d``); level ``n`` (1-based) is the
``n``-th delay and is served by queue ``n - 1`` of ``SCHEDULE_TOPIC_XXXX``. Tests
configure short levels ("100ms 200ms ..."). Delays must grow strictly: an
arbitrary delivery time (``deliver_at_ms``) is reached in hops of the largest
level that fits (:meth:`DelayLevels.hop`), which needs the table sorted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
MAX_LEVELS = 18
"""Queues of SCHEDULE_TOPIC_XXXX, one per level."""
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY = re.compile(r"^(\d{1,9})(ms|s|m|h|d)$")


class InvalidDelayLevels(ValueError):
    """``message_delay_level`` is not a list of growing delays."""


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """The delays of ``text`` in ms, level 1 first; InvalidDelayLevels naming the bad part."""
    parts = text.split()
    if not 1 <= len(parts) <= MAX_LEVELS:
        raise InvalidDelayLevels(f"message_delay_level: 1..{MAX_LEVELS} delays, got {len(parts)}")
    delays = []
    for part in parts:
        match = _DELAY.fullmatch(part)
        if match is None:
            raise InvalidDelayLevels(
                f"message_delay_level: {part!r:.20} is not a number with "
                f"a unit ({', '.join(_UNIT_MS)})"
            )
        delays.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    if any(d <= 0 for d in delays) or any(b <= a for a, b in zip(delays, delays[1:], strict=False)):
        raise InvalidDelayLevels(
            "message_delay_level: delays must be positive and grow strictly from level to level"
        )
    return tuple(delays)


@dataclass(frozen=True)
class DelayLevels:
    """The parsed table (level ``n`` -> ``delays_ms[n - 1]``)."""

    delays_ms: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> DelayLevels:
        return cls(parse_delay_levels(text))

    @property
    def count(self) -> int:
        """The highest level."""
        return len(self.delays_ms)

    def delay_ms(self, level: int) -> int:
        """The delay of ``level`` (1..count); levels past the last take the last one
        (a retry's 3 + reconsume_times grows past 18, as in RocketMQ)."""
        return self.delays_ms[min(max(level, 1), self.count) - 1]

    def clamp(self, level: int) -> int:
        """``level`` within 1..count."""
        return min(max(level, 1), self.count)

    def hop(self, remaining_ms: int) -> tuple[int, int]:
        """``(level, delay_ms)`` of the next hop towards a time ``remaining_ms`` away.

        The largest level whose delay fits, so each level queue stays ordered by
        delivery time and the message is never early; below the first level the
        hop is the remainder itself, in level 1's queue, where it may wait behind
        an entry due at most one level-1 delay later (bounded lateness, never early).
        """
        level = 0
        for index, delay in enumerate(self.delays_ms):
            if delay > remaining_ms:
                break
            level = index + 1
        if level == 0:
            return 1, max(remaining_ms, 0)
        return level, self.delays_ms[level - 1]
