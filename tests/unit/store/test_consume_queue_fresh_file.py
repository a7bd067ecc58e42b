"""A consume queue's new file: made without waiting for the disk, read without readahead.

services/store/mapped_file.py: a file the store creates and then writes through its
mapping from its start has nothing on disk to read ahead, yet the first write's page
fault would read around it (the whole window of unwritten space) on the store's event
loop. The advice is read back from the kernel (``VmFlags`` ``rr`` of the mapping in
/proc/self/smaps) and its effect from the page cache (mincore(2),
tests/page_residency.py); a full file gets normal readahead back for its readers.

The file is sized as a ``.tmp`` and renamed with no fsync (it is made in the dispatch, on
the store's event loop); the queue's next flush makes its name durable, directories first,
before its data's fdatasync (the system calls are recorded as the kernel is asked for
them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.store.consume_queue import ENTRY_SIZE, ConsumeQueue, ConsumeQueueTable
from services.store.mapped_file import MappedFile
from tests.page_residency import resident_pages
from tests.sync_calls import record_syncs

PER_FILE = 100_000
"""Entries per file: 2,000,000 bytes (488 pages and a bit)."""
FILE_BYTES = PER_FILE * ENTRY_SIZE


def vm_flags(path: Path) -> set[str]:
    """The kernel's VmFlags of this process's mapping of ``path``."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for n, line in enumerate(lines):
        if line.endswith(" " + str(path)):
            for after in lines[n + 1 :]:
                if after.startswith("VmFlags:"):
                    return set(after.split()[1:])
    raise AssertionError(f"{path} is not mapped here")


def put(cq: ConsumeQueue, first: int, count: int) -> None:
    for k in range(first, first + count):
        cq.put(k, k * 100, 100, 7, 1)


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumeQueueTable]:
    (tmp_path / "consumequeue").mkdir()  # as a store's start makes it
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE_BYTES)
    yield table
    table.close()


def test_a_new_queues_first_write_caches_only_the_page_it_writes(
    table: ConsumeQueueTable,
) -> None:
    cq = table.get_or_create("T", 0)
    put(cq, 0, 1)
    (first,) = cq.files.files
    assert "rr" in vm_flags(first.path)
    resident = resident_pages(first.path)
    assert resident[0]
    # a read-around fault would have brought in the pages after it too
    assert sum(resident) <= 2, f"{sum(resident)} of {len(resident)} pages cached"
    assert cq.entry_columns(0, 1)[0].tolist() == [0]


def test_a_full_file_gets_readahead_back_and_the_next_one_starts_random(
    table: ConsumeQueueTable,
) -> None:
    cq = table.get_or_create("T", 0)
    put(cq, 0, PER_FILE + 1)
    first, second = cq.files.files
    assert first.random_access is False and "rr" not in vm_flags(first.path)
    assert second.random_access is True and "rr" in vm_flags(second.path)
    offsets, sizes = cq.entry_columns(PER_FILE - 2, 3)
    assert offsets.tolist() == [k * 100 for k in range(PER_FILE - 2, PER_FILE + 1)]
    assert set(sizes.tolist()) == {100}


def test_a_file_loaded_from_disk_reads_with_readahead(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE_BYTES)
    put(table.get_or_create("T", 0), 0, 10)
    table.flush(0)
    table.close()
    again = ConsumeQueueTable(tmp_path / "consumequeue", FILE_BYTES)
    try:
        again.load()
        cq = again.get_or_create("T", 0)
        (loaded,) = cq.files.files
        assert loaded.random_access is False and "rr" not in vm_flags(loaded.path)
    finally:
        again.close()


def test_settle_is_once_and_a_file_mapped_without_the_flag_reads_normally(
    tmp_path: Path,
) -> None:
    path = tmp_path / "00000000000000000000"
    created = MappedFile(path, FILE_BYTES, create=True, fresh_random=True)
    try:
        assert created.random_access and "rr" in vm_flags(path)
        created.settle()
        created.settle()  # once is enough; a second call changes nothing
        assert not created.random_access and "rr" not in vm_flags(path)
    finally:
        created.close()
    reopened = MappedFile(path, FILE_BYTES)
    try:
        assert not reopened.random_access and "rr" not in vm_flags(path)
    finally:
        reopened.close()


def test_a_new_queue_waits_for_no_disk_and_its_next_flush_makes_its_names_durable(
    table: ConsumeQueueTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = record_syncs(monkeypatch)
    root = table.root
    cq = table.get_or_create("T", 3)
    put(cq, 0, 5)
    assert synced == []  # made on the caller's thread without waiting for the disk
    (made,) = cq.files.files
    assert made.path == root / "T" / "3" / "00000000000000000000"
    assert made.path.stat().st_size == FILE_BYTES
    assert sorted(p.name for p in made.path.parent.iterdir()) == [made.path.name]  # no .tmp

    cq.flush(0)
    dirs = [path for kind, path in synced if kind == "fsync"]
    assert sorted(dirs) == sorted([root / "T" / "3", root / "T", root])
    assert synced[-1] == ("fdatasync", made.path)  # the names before the data
    assert cq.files.flushed_offset == 5 * ENTRY_SIZE

    synced.clear()
    put(cq, 5, 5)
    cq.flush(0)
    assert synced == [("fdatasync", made.path)]  # the names once


def test_a_queues_next_file_follows_a_durable_name(
    table: ConsumeQueueTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second file of a queue is made only once the first one's name is durable, so
    a crash never leaves a later file without the one before it."""
    root = table.root
    cq = table.get_or_create("T", 0)
    put(cq, 0, 1)
    synced = record_syncs(monkeypatch)
    put(cq, 1, PER_FILE)  # no flush between: the second file is made
    assert len(cq.files.files) == 2
    assert sorted(synced) == sorted(("fsync", d) for d in (root / "T" / "0", root / "T", root))
