"""The master side's bookkeeping: which reports are possible, and replica lag."""

from __future__ import annotations

import pytest

from services.ha.errors import OffsetMismatch
from services.ha.master import AckWindow
from services.ha.replicas import ReplicaLag, ReplicaTracker


def test_reports_must_name_the_replicas_end_or_a_chunk_end() -> None:
    window = AckWindow(acked_offset=0, start_offset=3000)  # an empty replica from a segment
    assert not window.ack(0)  # a heartbeat before the first chunk
    window.sent(3100)
    window.sent(3250)
    window.sent(3400)
    assert len(window) == 4
    assert window.ack(3250)  # coalesced: skips the end of the first chunk
    assert window.acked_offset == 3250 and len(window) == 1
    assert not window.ack(3250)
    with pytest.raises(OffsetMismatch, match="3300"):
        window.ack(3300)  # inside a chunk: the replica cannot be there
    with pytest.raises(OffsetMismatch):
        window.ack(3100)  # going back
    with pytest.raises(OffsetMismatch):
        window.ack(3500)  # beyond what was sent
    assert window.ack(3400) and len(window) == 0


def test_a_replica_resuming_where_it_is_needs_no_start_point() -> None:
    window = AckWindow(acked_offset=500, start_offset=500)
    assert len(window) == 0
    with pytest.raises(OffsetMismatch):
        window.ack(0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lag_counts_bytes_and_the_time_since_the_replica_last_had_everything() -> None:
    clock = Clock()
    tracker = ReplicaTracker(monotonic=clock, wall_ms=lambda: 7)
    tracker.note_master_max(1000)
    session = tracker.open("r1:1", 1000)
    assert tracker.lags() == [ReplicaLag("r1:1", 1000, 0, 0.0, 7)]
    tracker.note_master_max(1500)
    clock.now += 2.5
    assert tracker.lags() == [ReplicaLag("r1:1", 1000, 500, 2.5, 7)]
    assert tracker.report("r1:1", session, 1500)
    clock.now += 1
    assert tracker.lags()[0].lag_seconds == 0.0
    tracker.note_master_max(1200)  # never goes back
    assert tracker.master_max_offset == 1500


def test_only_the_newest_session_of_a_replica_counts() -> None:
    tracker = ReplicaTracker()
    old = tracker.open("r1:1", 0)
    new = tracker.open("r1:1", 10)
    assert not tracker.report("r1:1", old, 5)
    assert not tracker.close("r1:1", old)  # the old stream ending does not forget it
    assert tracker.acked_offsets() == {"r1:1": 10}
    assert tracker.close("r1:1", new)
    assert tracker.acked_offsets() == {}
