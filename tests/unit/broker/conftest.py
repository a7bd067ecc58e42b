"""A hand-driven millisecond clock for the broker's expiry logic."""

from __future__ import annotations

import pytest


class ManualClock:
    """Returns ``now_ms``; tests move it with :meth:`advance` instead of sleeping."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        self.now_ms += delta_ms


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
