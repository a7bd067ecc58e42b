"""Recovery (docs/store-format.md) of consume queues and the index from the CommitLog.

Lost, zeroed, short or emptied consume-queue files (a queue's files are made
without waiting for the disk, durable at its next flush) are rebuilt byte for byte; entries
past the CommitLog's end are removed after a crash and on a clean start; with
queues and index both gone, re-dispatch recreates them equal to the originals.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from boltmq.cli.inspect_store import inspect_directory
from services.store import MessageStore
from services.store.mapped_file import file_name
from services.store.verify import verify_directory
from tests.unit.store.recovery_helpers import (
    assert_served_exactly,
    crash,
    message,
    patch_file,
    put_all,
    zero_commitlog_from,
)


def queue_files(root: Path) -> dict[str, bytes]:
    """Every consume-queue file's bytes, by its path under ``consumequeue``."""
    base = root / "consumequeue"
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("damage", ["delete", "zero", "cut_short", "emptied"])
def test_lost_consume_queues_are_rebuilt_from_the_commitlog(
    make_store: Callable[..., MessageStore], damage: str
) -> None:
    """Crash after the CommitLog reached disk but before the consume queues did."""
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    original = queue_files(root)
    crash(store)
    (root / "checkpoint").unlink()  # zero timestamps: re-dispatch from the first segment
    cq_dir = root / "consumequeue" / "T"
    if damage == "delete":
        shutil.rmtree(root / "consumequeue")
    for queue_id in range(3):
        path = cq_dir / str(queue_id) / file_name(0)
        if damage == "zero":
            patch_file(path, 0, bytes(path.stat().st_size))
        elif damage == "cut_short":  # the last 10 entries never reached the disk
            patch_file(path, 30 * 20, bytes(10 * 20))
        elif damage == "emptied":  # its name reached the disk, its size did not
            os.truncate(path, 0)

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False and report.start_offset == 0
    assert_served_exactly(store, written)
    assert queue_files(root) == original
    assert store.verify() == []


def test_queue_entries_past_the_commitlog_end_are_removed_after_a_crash(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    crash(store)
    cut = 100
    zero_commitlog_from(root, written[cut].offset)  # the CommitLog tail never reached disk
    (root / "checkpoint").unlink()

    store = make_store()
    report = store.recovery
    assert report is not None and report.commitlog_max_offset == written[cut].offset
    assert_served_exactly(store, written[:cut])
    for queue_id in range(3):
        assert store.max_offset("T", queue_id) == sum(
            1 for w in written[:cut] if w.msg.queue_id == queue_id
        )
    assert store.verify() == []


def test_queue_entries_past_the_commitlog_end_are_removed_on_a_clean_start(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    store.shutdown()
    cut = 95
    zero_commitlog_from(root, written[cut].offset)

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is True
    assert report.commitlog_max_offset == written[cut].offset
    removed = [n for n in report.notes if "removed" in n]
    assert len(removed) == 3, report.notes  # every queue had entries past the new end
    assert_served_exactly(store, written[:cut])
    for w in written[cut:]:
        assert store.look_message(w.offset) is None
    more = put_all(store, [message(500 + i) for i in range(3)])
    assert more[0].offset == written[cut].offset
    assert sorted(w.result.queue_offset for w in more) == sorted(
        w.result.queue_offset for w in written[cut : cut + 3]
    )
    store.wait_dispatched()
    assert_served_exactly(store, written[:cut] + more)
    assert store.verify() == []


def test_queues_and_index_rebuilt_from_the_commitlog_equal_the_originals(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    # 1100 messages in queue T/0 spill into a second 1000-entry consume-queue file.
    msgs = [message(i, topic="T", queues=1, max_bytes=60) for i in range(1100)]
    msgs += [message(i, topic="V", queues=4, max_bytes=400) for i in range(200)]
    random.Random(7).shuffle(msgs)
    written = put_all(store, msgs)
    root = store.root
    original = queue_files(root)
    assert "T/0/" + file_name(1000 * 20) in original
    crash(store)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "checkpoint").unlink()

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False and report.start_offset == 0
    assert queue_files(root) == original
    assert_served_exactly(store, written)
    for w in written:
        found = store.query_messages(w.msg.topic, w.msg.keys[0])
        assert [m.commitlog_offset for m in found] == [w.offset], w.msg.keys[0]
    assert store.verify() == []


def test_a_crash_before_a_new_queues_flush_is_named_offline_and_rebuilt_on_start(
    make_store: Callable[..., MessageStore],
) -> None:
    """A queue made since the last flush may be left empty or short by a crash: the
    offline reader names it and reads the other queues (the size of the queue files is
    taken from the files that are whole), the store's start extends and rebuilds it."""
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    crash(store)
    (root / "checkpoint").unlink()
    emptied = root / "consumequeue" / "T" / "0" / file_name(0)
    os.truncate(emptied, 0)
    short = root / "consumequeue" / "T" / "1" / file_name(0)
    os.truncate(short, 100)

    problems = verify_directory(root)
    size = (root / "consumequeue" / "T" / "2" / file_name(0)).stat().st_size
    assert problems[:2] == [
        f"{emptied} is 0 of {size} bytes (torn: a store's start extends it and "
        f"re-dispatches its entries): queue not read",
        f"{short} is 100 of {size} bytes (torn: a store's start extends it and "
        f"re-dispatches its entries): queue not read",
    ]
    shown = "\n".join(inspect_directory(root, 0, None))
    assert "  T/2: queue offsets 0..40 (40 entries), 1 files" in shown
    assert f"  {emptied} is 0 of {size} bytes" in shown

    store = make_store()
    assert_served_exactly(store, written)
    assert store.verify() == []
