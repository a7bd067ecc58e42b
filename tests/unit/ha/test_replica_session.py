"""The master's view of one replica's stream: which reports are possible."""

from __future__ import annotations

import pytest

from services.ha.errors import OffsetMismatch
from services.ha.replica_session import AckWindow


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
