"""A store's index files are mapped for random reads (services/store/index_service.py).

The advice is read back from the kernel (the ``rr`` flag of the mapping in
``/proc/self/smaps``) and its effect measured with mincore(2) on a fresh mapping of
the file (tests/page_residency.py): a lookup over released pages brings back the
pages it reads, not the disk's read-ahead around each of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from services.store import MessageStore
from services.store.index_service import IndexService
from tests.page_residency import PAGE_SIZE, resident_pages
from tests.unit.store.recovery_helpers import message, put_all
from tests.waiting import wait_until

SLOTS = 100_000
"""As many slots as entries: a key's chain is about one entry long."""
ENTRIES = 100_000
STORE_TS = 1_767_225_600_000


def advised_random(path: Path) -> list[bool]:
    """For each mapping of ``path`` in this process, whether it is advised MADV_RANDOM."""
    found: list[bool] = []
    mapping: str | None = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's first line
                mapping = fields[5] if len(fields) > 5 else None
            elif fields[0] == "VmFlags:" and mapping == str(path):
                found.append("rr" in fields[1:])
    return found


def index_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "index").iterdir() if p.name.isdigit())


def test_a_store_maps_every_index_file_for_random_reads_made_or_loaded(
    make_store: Callable[..., MessageStore],
) -> None:
    overrides = dict(max_hash_slot_num=10, max_index_num=40)  # 39 entries a file
    store = make_store(**overrides)
    put_all(store, [message(i) for i in range(100)])  # a key each: two rolls
    assert store.wait_dispatched()
    made = index_files(store.root)
    assert len(made) == 3
    assert [advised_random(p) for p in made] == [[True]] * 3
    store.shutdown()

    store = make_store(**overrides)
    assert [advised_random(p) for p in index_files(store.root)] == [[True]] * 3


def test_an_index_opened_by_a_tool_keeps_normal_advice(tmp_path: Path) -> None:
    """An index of no store (``boltmq store verify``) reads files whole: left to readahead."""
    index = IndexService(tmp_path / "index", 10, 40)
    try:
        for n in range(50):
            index.build_index("T", [f"k{n}"], 100 * (n + 1), STORE_TS)
        assert [advised_random(f.path) for f in index.files] == [[False]] * 2
    finally:
        index.close()


def filled(directory: Path) -> None:
    """Two files' worth of keys ``k<n>`` at CommitLog offset ``100 (n+1)``, flushed."""
    index = IndexService(directory, SLOTS, ENTRIES)
    try:
        count = 2 * (ENTRIES - 1)
        index.build_index_run(
            "T", [(f"k{n}",) for n in range(count)], [100 * (n + 1) for n in range(count)], STORE_TS
        )
        assert len(index.files) == 2
    finally:
        index.close()


def pages_a_lookup_brings_back(directory: Path, random_reads: bool) -> int:
    """Pages of the full file resident after one lookup of a key in it, all released first."""
    index = IndexService(directory, SLOTS, ENTRIES, random_reads=random_reads)
    try:
        index.load(True, 0)
        full = index.files[0]
        full.mapped.drop_cached(0, full.mapped.file_size)
        assert not any(resident_pages(full.path))
        assert index.query("T", "k4321", 10, 0, 1 << 62) == [432_200]
        return sum(resident_pages(full.path))
    finally:
        index.close()


def test_a_lookup_over_released_pages_brings_back_only_the_pages_it_reads(
    tmp_path: Path,
) -> None:
    filled(tmp_path / "index")
    size = (tmp_path / "index").iterdir().__next__().stat().st_size
    assert size > 64 * PAGE_SIZE  # the file is larger than a read-ahead
    random_pages = pages_a_lookup_brings_back(tmp_path / "index", random_reads=True)
    normal_pages = pages_a_lookup_brings_back(tmp_path / "index", random_reads=False)
    assert 1 <= random_pages <= 4  # the header's and slot's page, the entry's
    assert normal_pages > random_pages  # read-ahead around each fault


def test_a_loaded_store_asks_for_its_newest_slot_table_at_once(
    make_store: Callable[..., MessageStore],
) -> None:
    """The newest file's puts write its slot table all over: one request for all of it."""
    overrides = dict(max_hash_slot_num=SLOTS, max_index_num=ENTRIES)
    store = make_store(**overrides)
    put_all(store, [message(i) for i in range(10)])
    assert store.wait_dispatched()
    store.shutdown()
    (newest,) = index_files(store.root)
    fd = os.open(newest, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    table_pages = (40 + 4 * SLOTS) // PAGE_SIZE
    assert not all(resident_pages(newest)[:table_pages])

    make_store(**overrides)
    wait_until(
        lambda: all(resident_pages(newest)[:table_pages]), "the slot table read into the cache"
    )
