"""A started producer with nothing queued sleeps: its async-send thread waits without a
timeout (with ``linger_ms=0`` a timed wait of 0 s would turn it into a spinning loop)."""

from __future__ import annotations

import sys
import threading
import time
from types import FrameType

import pytest

from boltmq import Producer, ProducerOptions
from tests.waiting import wait_until


def _send_thread() -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == "boltmq-producer"]
    return thread


def _waiting_timeout(thread: threading.Thread) -> object:
    """The ``timeout`` of the Condition.wait the thread is in; "running" when in none."""
    assert thread.ident is not None
    frame: FrameType | None = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith("threading.py"):
            return frame.f_locals.get("timeout", "running")
        frame = frame.f_back
    return "running"


@pytest.mark.parametrize("linger_ms", [0, 5])
def test_an_idle_producer_waits_without_a_timeout(linger_ms: int) -> None:
    # No registry is needed: nothing is sent, and the heartbeat only logs its failures.
    producer = Producer(
        "127.0.0.1:9", "idle-pg", options=ProducerOptions(linger_ms=linger_ms)
    ).start()
    try:
        thread = _send_thread()
        wait_until(lambda: _waiting_timeout(thread) != "running", "the thread to wait")
        seen = set()
        for _ in range(20):
            seen.add(_waiting_timeout(thread))
            time.sleep(0.005)
        assert seen == {None}, seen
    finally:
        producer.shutdown()
    assert not thread.is_alive()
