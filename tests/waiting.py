"""Waiting in tests: poll a condition until it holds or a bound passes."""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT_S = 30.0
"""How long a test waits for something the services do in the background."""
POLL_S = 0.05


def wait_until(
    condition: Callable[[], object],
    what: str,
    timeout_s: float = WAIT_S,
    interval_s: float = POLL_S,
) -> None:
    """Poll ``condition`` every ``interval_s`` until it is true; AssertionError naming
    ``what`` after ``timeout_s``. An interval of 0 suits a condition that does the work
    itself (a send that fills a disk)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval_s)
