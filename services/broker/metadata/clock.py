"""The broker's time sources, injectable so tests drive expiry without sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""A function returning milliseconds."""


def monotonic_ms() -> int:
    """Milliseconds of a clock that never jumps (for expiry and deadlines)."""
    return time.monotonic_ns() // 1_000_000


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (for data versions compared across restarts)."""
    return time.time_ns() // 1_000_000
