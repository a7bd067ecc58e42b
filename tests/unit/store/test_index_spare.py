"""The next index file, made ahead in the background (services/store/index_spare.py).

Once the newest file is half full a thread makes ``index/next.tmp`` (sized, its slot
table read into the page cache, checked with mincore(2) on a fresh mapping); the roll
renames that very file (same inode) to the new file's name. A spare still being made
is not waited for, a failed making costs the roll nothing, and the spare never
outlives a close or counts as data at a load.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import services.store.index_spare as index_spare
from services.store import MessageStore
from services.store.index_file import HEADER_SIZE, SLOT_SIZE, index_file_size
from services.store.index_service import IndexService
from services.store.index_spare import SPARE_NAME
from services.store.mapped_file import PAGE_SIZE
from tests.page_residency import resident_pages
from tests.unit.store.recovery_helpers import crash, message, put_all

SLOTS, ENTRIES = 2048, 40
"""An 8,192-byte slot table (pages 0-2 with the header) and 39 entries a file."""
SIZE = index_file_size(SLOTS, ENTRIES)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[IndexService]:
    service = IndexService(tmp_path / "index", SLOTS, ENTRIES, make_ahead=True)
    yield service
    service.close()


def fill(index: IndexService, first: int, count: int) -> None:
    """Records ``first .. first + count``, one key each, at CommitLog offset ``100 n``."""
    for n in range(first, first + count):
        index.build_index("T", [f"k{n}"], 100 * (n + 1), 1_000 + n)


def spare(index: IndexService) -> Path:
    return index.index_dir / SPARE_NAME


def test_the_spare_is_made_once_the_newest_file_is_half_full(index: IndexService) -> None:
    fill(index, 0, 19)  # 19 of 39: less than half
    assert index.spare is not None
    index.spare.wait()
    assert not spare(index).exists()

    fill(index, 19, 1)
    index.spare.wait()
    assert spare(index).stat().st_size == SIZE
    cached = (HEADER_SIZE + SLOTS * SLOT_SIZE + PAGE_SIZE - 1) // PAGE_SIZE
    assert all(resident_pages(spare(index))[:cached])


def test_the_roll_takes_the_spare_itself(index: IndexService) -> None:
    fill(index, 0, 20)
    assert index.spare is not None
    index.spare.wait()
    made = os.stat(spare(index)).st_ino

    fill(index, 20, 20)  # the 40th entry rolls
    assert len(index.files) == 2
    assert os.stat(index.files[-1].path).st_ino == made
    assert not spare(index).exists()
    assert not list(index.index_dir.glob("*.tmp"))
    for n in (0, 38, 39):
        assert index.query("T", f"k{n}", 10, 0, 1 << 62) == [100 * (n + 1)]

    fill(index, 40, 19)  # the new file half full: the next spare
    index.spare.wait()
    assert spare(index).stat().st_size == SIZE


def test_a_spare_still_being_made_is_not_waited_for(
    index: IndexService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roll makes its own file; the spare, made afterwards, serves the next roll."""
    release = threading.Event()
    real = index_spare.prepare_sized_file

    def held(tmp: Path, size: int, *, sync: bool = True) -> None:
        assert release.wait(30)
        real(tmp, size, sync=sync)

    monkeypatch.setattr(index_spare, "prepare_sized_file", held)
    fill(index, 0, 40)  # half full (the making starts and is held), then the roll
    assert len(index.files) == 2
    assert not spare(index).exists()

    release.set()
    assert index.spare is not None
    index.spare.wait()
    made = os.stat(spare(index)).st_ino
    assert made != os.stat(index.files[-1].path).st_ino
    fill(index, 40, 39)  # the next roll takes it
    assert len(index.files) == 3
    assert os.stat(index.files[-1].path).st_ino == made


def test_a_failed_making_costs_the_roll_nothing_and_is_tried_once_a_roll(
    index: IndexService, caplog: pytest.LogCaptureFixture
) -> None:
    spare(index).parent.mkdir(parents=True)
    spare(index).mkdir()  # where the spare goes, a directory: its making fails
    assert index.spare is not None
    with caplog.at_level(logging.WARNING, logger="services.store.index_spare"):
        fill(index, 0, 39)
        index.spare.wait()
        assert len(caplog.records) == 1  # once, though every put after half full asks
        assert "could not be made ahead" in caplog.records[0].getMessage()

        fill(index, 39, 40)  # two rolls, each with its file made in place
        index.spare.wait()
    assert len(index.files) == 3
    assert len(caplog.records) == 2
    for n in (0, 39, 78):
        assert index.query("T", f"k{n}", 10, 0, 1 << 62) == [100 * (n + 1)]
    spare(index).rmdir()


def test_a_close_removes_the_spare_and_a_load_one_left_by_a_crash(
    index: IndexService, tmp_path: Path
) -> None:
    fill(index, 0, 20)
    assert index.spare is not None
    index.spare.wait()
    index.close()
    assert not spare(index).exists()

    spare(index).write_bytes(b"\0" * 4096)  # as a crash mid-making leaves it
    reopened = IndexService(tmp_path / "index", SLOTS, ENTRIES, make_ahead=True)
    try:
        notes = reopened.load(True, 0)
        assert notes == [f"index: unfinished file {SPARE_NAME} removed"]
        assert not spare(reopened).exists()
        assert reopened.query("T", "k5", 10, 0, 1 << 62) == [600]
    finally:
        reopened.close()


def test_a_store_index_makes_its_spare_and_a_crash_restart_serves_every_key(
    make_store: Callable[..., MessageStore],
) -> None:
    overrides = dict(max_hash_slot_num=SLOTS, max_index_num=ENTRIES)
    store = make_store(**overrides)
    assert store.index.spare is not None
    written = put_all(store, [message(i) for i in range(60)])  # a key each
    assert store.wait_dispatched()
    store.index.spare.wait()
    assert len(store.index.files) == 2  # one roll, the second file half full
    assert (store.root / "index" / SPARE_NAME).stat().st_size == SIZE
    crash(store)

    store = make_store(**overrides)
    for w in written:
        found = store.query_messages("T", w.msg.keys[0])
        assert [m.commitlog_offset for m in found] == [w.offset], w.msg.keys[0]
    assert store.verify() == []
    store.shutdown()
    assert not list((store.root / "index").glob("*.tmp"))
