"""Recovery (docs/store-format.md) after a clean stop and after a crash, and the root's lock.

A clean restart trusts the consume queues; a crash (``recovery_helpers.crash``)
re-dispatches from the segment before the checkpoint. Either way every queue
serves exactly what was acknowledged and new appends continue where it stopped.
A second store on a locked root is refused and harms nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from services.store import MessageStore, StoreLocked
from services.store.checkpoint import CheckpointState, encode_checkpoint
from tests.conftest import small_config
from tests.unit.store.recovery_helpers import (
    SEGMENT_BYTES,
    assert_served_exactly,
    crash,
    message,
    put_all,
)


def test_clean_restart_brings_everything_back(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    msgs = [message(i, topic=("T" if i % 2 else "U")) for i in range(240)]
    written = put_all(store, msgs)
    end = store.commitlog.max_offset
    assert end > 2 * SEGMENT_BYTES  # several segments
    store.shutdown()
    assert not (store.root / "abort").exists()

    store = make_store()
    report = store.recovery
    assert report is not None
    assert report.clean is True
    assert report.truncated_bytes == 0
    assert report.commitlog_max_offset == end == store.commitlog.max_offset
    assert report.reput_offset == end  # every queue was already dispatched to the end
    assert not any("truncated" in note or "removed" in note for note in report.notes)
    assert (store.root / "abort").exists()
    assert_served_exactly(store, written)
    assert [m.msg_id for m in store.query_messages("T", "key-T-7")] == [written[7].result.msg_id]

    # New appends continue every queue where it stopped, after the old CommitLog end.
    more = put_all(store, [message(1000 + i, topic=t) for t in ("T", "U") for i in range(3)])
    for w in more:
        assert w.result.queue_offset == sum(
            1
            for old in written
            if (old.msg.topic, old.msg.queue_id) == (w.msg.topic, w.msg.queue_id)
        )
    assert more[0].offset >= end
    store.wait_dispatched()
    assert_served_exactly(store, written + more)
    assert store.verify() == []


# --------------------------------------------------------------------------- crash


def test_crash_recovery_redispatches_every_queue(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(150)])
    end = store.commitlog.max_offset
    crash(store)

    store = make_store()
    report = store.recovery
    assert report is not None
    assert report.clean is False
    assert report.commitlog_max_offset == end
    assert report.truncated_bytes == 0
    # The queues were cut back to the recovery start and rebuilt by re-dispatch.
    assert report.reput_offset == report.start_offset
    if report.start_offset == 0:
        assert sum("entries past CommitLog offset 0 removed" in n for n in report.notes) == 3
    assert store.dispatcher.reput_offset == end
    assert_served_exactly(store, written)
    for w in written[::17]:
        assert [m.commitlog_offset for m in store.query_messages("T", w.msg.keys[0])] == [w.offset]

    more = put_all(store, [message(150 + i) for i in range(3)])
    assert [w.result.queue_offset for w in more] == [50, 50, 50]
    store.wait_dispatched()
    assert_served_exactly(store, written + more)
    assert store.verify() == []


def test_crash_recovery_starts_at_the_segment_before_the_checkpoint(
    make_store: Callable[..., MessageStore],
) -> None:
    """A checkpoint newer than every record: only the last segment is re-dispatched."""
    store = make_store()
    written = put_all(store, [message(i) for i in range(160)])
    root = store.root
    last_segment = written[-1].offset - written[-1].offset % SEGMENT_BYTES
    assert last_segment >= 2 * SEGMENT_BYTES
    crash(store)
    future_ms = time.time_ns() // 1_000_000 + 60_000
    (root / "checkpoint").write_bytes(
        encode_checkpoint(CheckpointState(future_ms, future_ms, future_ms))
    )

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False
    assert report.start_offset == report.reput_offset == last_segment
    assert_served_exactly(store, written)
    # Records of the re-dispatched segment are indexed once, not twice.
    for w in written[-5:]:
        assert [m.commitlog_offset for m in store.query_messages("T", w.msg.keys[0])] == [w.offset]
    assert store.verify() == []


# --------------------------------------------------------------------------- lock


def test_second_store_on_the_same_root_is_refused(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(5)])
    intruder = MessageStore(small_config(store.root))
    with pytest.raises(StoreLocked):
        intruder.start()
    assert (store.root / "abort").exists()
    more = put_all(store, [message(5)])
    store.wait_dispatched()
    assert_served_exactly(store, written + more)
    store.shutdown()

    successor = make_store()  # free again once the owner shut down
    assert successor.recovery is not None and successor.recovery.clean is True
    assert_served_exactly(successor, written + more)
    assert successor.verify() == []
