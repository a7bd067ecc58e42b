"""A new index file waits for no disk: made in the dispatch, durable at the next flush.

services/store/index_service.py: an index file fills and the next starts in the
dispatch, which runs on the store's event loop. The roll neither flushes the full
file nor fsyncs the new one or the directory; the index's next flush fsyncs the
directory first, then every changed file (the system calls are recorded as the
kernel is asked for them). A crash before that flush may lose the new file's name:
the checkpoint never covers such a file, so recovery drops nothing it needs and
re-dispatches its entries.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from services.store import MessageStore
from services.store.index_service import IndexService
from services.store.index_spare import SPARE_NAME
from tests.sync_calls import SyncCalls, record_syncs
from tests.unit.store.recovery_helpers import assert_served_exactly, crash, message, put_all

SLOTS, ENTRIES = 10, 40


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> SyncCalls:
    return record_syncs(monkeypatch)


def test_a_roll_waits_for_no_disk_and_the_next_flush_syncs_the_directory_first(
    tmp_path: Path, synced: SyncCalls
) -> None:
    index = IndexService(tmp_path / "index", SLOTS, ENTRIES)
    try:
        for n in range(2 * ENTRIES):  # a file of 40 entries holds 39: two rolls at least
            index.build_index("T", [f"k{n}"], 100 * (n + 1), 1_000 + n)
        files = list(index.files)
        assert len(files) >= 3
        assert synced == []

        index.flush()
        assert synced[0] == ("fsync", tmp_path / "index")
        assert sorted(path for kind, path in synced[1:] if kind == "fdatasync") == sorted(
            f.path for f in files
        )
        assert [kind for kind, _ in synced].count("fsync") == 1
        synced.clear()

        index.build_index("T", ["again"], 100 * (2 * ENTRIES + 1), 2_000)
        index.flush()
        assert synced == [("fdatasync", files[-1].path)]  # no new name: only the data
        for n in (0, ENTRIES, 2 * ENTRIES - 1):
            assert index.query("T", f"k{n}", 10, 0, 1 << 62) == [100 * (n + 1)]
    finally:
        index.close()


def test_a_new_index_file_lost_in_a_crash_is_re_dispatched(
    make_store: Callable[..., MessageStore],
) -> None:
    """The newest index file's name did not reach the disk: recovery, from a checkpoint
    taken before the file was made, serves every key again."""
    overrides = dict(
        max_hash_slot_num=SLOTS,
        max_index_num=ENTRIES,
        flush_interval_consume_queue_ms=3_600_000,  # no flush round but the one below
        flush_consume_queue_thorough_interval_ms=3_600_000,
    )
    store = make_store(**overrides)
    before = put_all(store, [message(i) for i in range(30)])
    assert store.wait_dispatched()
    store.queue_flusher.flush_now()  # the checkpoint covers these
    covered = {f.path for f in store.index.files}
    after = put_all(store, [message(30 + i) for i in range(60)])
    assert store.wait_dispatched()
    made = [f.path for f in store.index.files if f.path not in covered]
    assert made, "the index rolled after the flush"
    root = store.root
    crash(store)
    for path in made:
        path.unlink()  # their names were never fsynced

    store = make_store(**overrides)
    assert_served_exactly(store, before + after)
    for w in before + after:
        found = store.query_messages("T", w.msg.keys[0])
        assert [m.commitlog_offset for m in found] == [w.offset], w.msg.keys[0]
    assert store.verify() == []
    assert store.index.spare is not None
    store.index.spare.wait()  # the next file, made ahead, is the only one unfinished
    assert [p.name for p in (root / "index").glob("*.tmp")] in ([], [SPARE_NAME])
