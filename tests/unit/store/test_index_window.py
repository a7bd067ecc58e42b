"""The index's page-cache window (services/store/index_window.py).

Residency is checked independently of the store, with mincore(2) on a fresh
mapping of the index files (tests/page_residency.py), as the consume-queue
window's tests do. Every key is unique, one per record (as the SDK's UNIQ_KEY):
record ``n`` at CommitLog offset ``100 n`` has key ``k<n>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boltmq.kernel.config import ConfigError
from services.store import MessageStore, PutStatus, StoreMessage
from services.store.config import StoreConfig
from services.store.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from services.store.index_service import IndexService
from services.store.index_window import IndexPageCacheWindow
from services.store.mapped_file import PAGE_SIZE
from services.store.page_cache import RELEASE_ALIGN_BYTES
from tests.conftest import small_config
from tests.page_residency import resident_pages
from tests.unit.store.recovery_helpers import crash, open_store
from tests.waiting import wait_until

TOPIC = "T"
SLOTS = 1000
"""A 4,000-byte slot table: the header and the table fill page 0 only."""
PER_FILE = 150_000
"""Entry numbers per file (the first unused): 3,004,040-byte files, 149,999 entries."""
ENTRIES_PER_FILE = PER_FILE - 1
WINDOW = 64 * 1024
ROUND = 10_000
"""Records indexed between two flushes."""
BASE_TS = 1_700_000_000_000
BOUND_PAGES = 1 + (WINDOW + RELEASE_ALIGN_BYTES) // PAGE_SIZE + 2
"""What the window may leave resident: the slot table's page, the window, one release
step, and the pages holding its ends."""
HEAD_PAGES = RELEASE_ALIGN_BYTES // PAGE_SIZE
"""The pages of a file's first release step. The kernel may cache them as one folio of
up to 2 MiB with the slot table's page, which is never released, and then keeps the folio
whole (it drops only folios wholly inside a released range): what the window leaves of a
file is bounded past them."""
LARGE_PER_FILE = 450_000
"""9 MB files: four release steps each, so the bound past the first step is a real one."""


def released_past_the_head_folio(pages: list[bool], end: int) -> bool:
    """Pages 1 .. ``end - 1`` of a file are released, but for what the kernel keeps as one
    folio with the slot table's page 0 (never released; see HEAD_PAGES): a resident run
    from page 0 of a power of two pages, HEAD_PAGES at most."""
    kept = next((i for i, page in enumerate(pages[:end]) if not page), end)
    return kept <= HEAD_PAGES and kept & (kept - 1) == 0 and not any(pages[kept:end])


def index_round(index: IndexService, first: int, count: int, store_ts: int = BASE_TS) -> None:
    """Records ``first .. first + count``, one key each, in one bulk append."""
    records = range(first, first + count)
    index.build_index_run(
        TOPIC, [(f"k{n}",) for n in records], [100 * n for n in records], store_ts
    )


def query(index: IndexService, n: int) -> list[int]:
    return index.query(TOPIC, f"k{n}", 64, 0, 1 << 62)


def sample(total: int) -> list[int]:
    """Records spread over every file, the first and last of each among them."""
    edges = [
        k * ENTRIES_PER_FILE + d for k in range(total // ENTRIES_PER_FILE + 1) for d in (-1, 0)
    ]
    return sorted({n for n in [*range(0, total, 997), *edges, total - 1] if 0 <= n < total})


def answers(index: IndexService, records: list[int]) -> dict[int, list[int]]:
    return {n: query(index, n) for n in records}


def resident(index_dir: Path) -> list[list[bool]]:
    """Each index file's resident pages, oldest file first."""
    return [resident_pages(p) for p in sorted(index_dir.iterdir())]


@pytest.fixture
def make_index(tmp_path: Path) -> Iterator[Callable[..., IndexService]]:
    made: list[IndexService] = []

    def make(window: int = WINDOW, name: str = "index", per_file: int = PER_FILE) -> IndexService:
        index = IndexService(tmp_path / name, SLOTS, per_file, window)
        made.append(index)
        return index

    yield make
    for index in made:
        index.close()


def fill_in_rounds(index: IndexService, total: int, check: Callable[[], None]) -> None:
    """Index ``total`` records, ROUND at a time, each round flushed and released."""
    for first in range(0, total, ROUND):
        index_round(index, first, min(ROUND, total - first))
        index.flush()
        index.release_behind()
        check()


def test_resident_index_pages_stay_bounded_over_many_puts_and_flushes(
    make_index: Callable[..., IndexService],
) -> None:
    index = make_index(per_file=LARGE_PER_FILE)
    entries_per_file = LARGE_PER_FILE - 1
    total = 2 * entries_per_file + 300_000  # two full files and a third past two steps
    highest = [0]
    swept = [0]

    def window_pages() -> int:
        *older, newest = resident(index.index_dir)
        assert not any(any(pages) for pages in older)
        # The kernel reads ahead of the writer's faults (read_ahead_kb, 8 MiB on the test
        # VM: the whole file): what lies past the written entries is not counted.
        written_pages = -(-index.files[-1].entries_end // PAGE_SIZE)
        return sum(newest[HEAD_PAGES:written_pages])

    def check() -> None:
        pages = window_pages()
        if pages > BOUND_PAGES - 1:
            # POSIX_FADV_DONTNEED skips a folio the kernel holds locked at that moment
            # (migrating or compacting it, seen once in a loaded CI run): the next sweep,
            # which releases the whole range again, must drop it.
            swept[0] += 1
            interval_s = index.page_cache.sweep.interval_s
            index.page_cache.sweep.interval_s = 0.0
            index.release_behind()
            index.page_cache.sweep.interval_s = interval_s
            pages = window_pages()
        highest[0] = max(highest[0], pages)
        assert pages <= BOUND_PAGES - 1  # the slot table's page is a head page

    fill_in_rounds(index, total, check)

    first, second, third = resident(index.index_dir)
    assert not any(first) and not any(second)  # full and flushed: released whole
    assert third[0]  # the header and the slot table stay
    written = index.files[-1].entries_end
    target = (written - WINDOW) // RELEASE_ALIGN_BYTES * RELEASE_ALIGN_BYTES
    assert target > RELEASE_ALIGN_BYTES  # something past the head step was released
    assert not any(third[HEAD_PAGES : target // PAGE_SIZE])
    assert all(third[target // PAGE_SIZE : -(-written // PAGE_SIZE)])  # the window's pages
    assert index.page_cache.released_bytes >= 2 * index.files[0].mapped.file_size
    assert highest[0] > BOUND_PAGES // 2  # the bound was measured against real writes
    assert swept[0] <= 2  # a skipped folio is rare, not the window's way
    assert index.verify_entries() == []


def test_without_the_window_every_written_index_page_stays(
    make_index: Callable[..., IndexService],
) -> None:
    index = make_index(window=0)
    total = 2 * ENTRIES_PER_FILE + 120_000
    fill_in_rounds(index, total, lambda: None)
    assert index.release_behind() == 0 and index.page_cache.released_bytes == 0
    pages = sum(sum(file) for file in resident(index.index_dir))
    written_pages = (total * ENTRY_SIZE) // PAGE_SIZE
    assert pages > BOUND_PAGES and pages >= written_pages * 9 // 10


def test_lookups_find_every_key_on_released_pages_and_a_sweep_releases_them_again(
    make_index: Callable[..., IndexService],
) -> None:
    index = make_index()
    total = 2 * ENTRIES_PER_FILE + 120_000
    fill_in_rounds(index, total, lambda: None)
    assert not any(resident(index.index_dir)[0])
    records = sample(total)
    before = answers(index, records)
    assert before == {n: [100 * n] for n in records}  # faulted back in from the files
    assert index.verify_entries() == []  # reads every slot and entry
    assert all(resident(index.index_dir)[0])
    assert index.release_behind() == 0  # nothing new flushed, no sweep due
    assert all(resident(index.index_dir)[0])

    index.page_cache.sweep.interval_s = 0.0
    assert index.release_behind() > 2 * index.files[0].mapped.file_size - PAGE_SIZE
    first, second, third = resident(index.index_dir)
    assert not any(first) and not any(second) and released_past_the_head_folio(third, HEAD_PAGES)
    assert answers(index, records) == before


def test_unflushed_entries_are_never_released(make_index: Callable[..., IndexService]) -> None:
    index = make_index()
    index_round(index, 0, 130_000)  # past the first release step
    index.flush()
    flushed_end = index.files[-1].flushed_end
    index_round(index, 130_000, 15_000)  # not flushed
    written_end = index.files[-1].entries_end
    assert index.files[-1].flushed_end == flushed_end < written_end
    # The smallest window and step: everything flushed but the page of its end goes.
    index.page_cache = IndexPageCacheWindow(1, align_bytes=PAGE_SIZE)
    assert index.release_behind() > 0

    (pages,) = resident(index.index_dir)
    flushed_page = flushed_end // PAGE_SIZE
    assert flushed_page > HEAD_PAGES
    assert pages[0] and released_past_the_head_folio(pages, flushed_page)
    assert all(pages[flushed_page : -(-written_end // PAGE_SIZE)])
    assert answers(index, list(range(129_990, 145_000))) == {
        n: [100 * n] for n in range(129_990, 145_000)
    }


def test_a_full_file_is_released_only_once_flushed(make_index: Callable[..., IndexService]) -> None:
    index = make_index()
    index_round(index, 0, ENTRIES_PER_FILE + 10)  # the roll flushes the full file
    full, written = index.files
    full.dirty = True  # as if written after that flush
    assert index.release_behind() == 0
    assert all(resident_pages(full.path)[: full.entries_end // PAGE_SIZE])
    index.flush()
    assert index.release_behind() >= full.mapped.file_size - PAGE_SIZE
    assert not any(resident_pages(full.path))
    assert written.released_to == 0  # its entries all lie within the window


def test_lookups_are_the_same_after_a_restart(make_index: Callable[..., IndexService]) -> None:
    index = make_index()
    total = ENTRIES_PER_FILE + 120_000
    fill_in_rounds(index, total, lambda: None)
    records = sample(total)
    before = answers(index, records)
    index.close()

    reopened = make_index()
    assert reopened.load(True, 0) == []
    assert all(sum(file) for file in resident(reopened.index_dir))  # the close left them
    assert reopened.release_behind() > 0  # what a clean load opens is on disk already
    first, second = resident(reopened.index_dir)
    assert not any(first) and released_past_the_head_folio(second, HEAD_PAGES)
    assert answers(reopened, records) == before


def test_crash_cut_and_truncation_keep_lookups_exact_on_released_pages(
    make_index: Callable[..., IndexService],
) -> None:
    index = make_index()
    # Two stretches of store time: the second is newer than the crash's checkpoint.
    index_round(index, 0, ENTRIES_PER_FILE + 120_000, BASE_TS)
    index_round(index, ENTRIES_PER_FILE + 120_000, 20_000, BASE_TS + 60_000)
    index.flush()
    index.release_behind()
    total = ENTRIES_PER_FILE + 140_000
    records = sample(total)
    before = answers(index, records)
    index.close()

    recovered = make_index()
    notes = recovered.load(False, BASE_TS + 30_000)  # cuts the second stretch
    assert notes and "cut" in notes[0]
    kept = ENTRIES_PER_FILE + 120_000
    assert answers(recovered, records) == {n: before[n] if n < kept else [] for n in records}
    # The cut file is dirty: its flushed end went back to its last entry, nothing past it
    # (zeroed, not yet flushed) is released.
    cut = recovered.files[-1]
    assert cut.flushed_end == cut.entries_end
    recovered.release_behind()
    pages = resident_pages(cut.path)
    zeroed_end = HEADER_SIZE + SLOTS * SLOT_SIZE + 140_001 * ENTRY_SIZE
    assert released_past_the_head_folio(pages, HEAD_PAGES)
    assert all(pages[cut.entries_end // PAGE_SIZE : zeroed_end // PAGE_SIZE])
    assert not any(resident_pages(recovered.files[0].path))

    # A shorter CommitLog (a demoted master's): entries at or past its end go too.
    end = 100 * (ENTRIES_PER_FILE + 50_000)
    recovered.truncate_past(end)
    recovered.flush()
    recovered.page_cache.sweep.interval_s = 0.0
    recovered.release_behind()
    kept = ENTRIES_PER_FILE + 50_000
    assert answers(recovered, records) == {n: before[n] if n < kept else [] for n in records}
    assert recovered.verify_entries() == []
    index_round(recovered, kept, 10)  # the dispatcher goes on after the cut
    assert query(recovered, kept + 9) == [100 * (kept + 9)]


def test_redispatch_after_a_cut_that_empties_the_newest_file_indexes_nothing_twice(
    tmp_path: Path,
) -> None:
    index = IndexService(tmp_path / "index", 8, 5)  # 4 entries a file
    index_round(index, 0, 8, BASE_TS)  # two full files
    index_round(index, 8, 1, BASE_TS + 10_000)  # a third, begun in the checkpoint's second
    index_round(index, 9, 1, BASE_TS + 10_800)
    index.close()
    recovered = IndexService(tmp_path / "index", 8, 5)
    notes = recovered.load(False, BASE_TS + 10_400)  # cuts all of the third, keeps the file
    assert notes == [
        "index: 2 entries of " + recovered.files[-1].path.name + " newer than the checkpoint cut"
    ]
    assert [f.entry_count for f in recovered.files] == [4, 4, 0]
    index_round(recovered, 0, 10, BASE_TS + 10_000)  # recovery re-dispatches from the start
    assert {n: query(recovered, n) for n in range(10)} == {n: [100 * n] for n in range(10)}
    assert [f.entry_count for f in recovered.files] == [4, 4, 2]
    recovered.close()


def test_window_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="index_page_cache_window_bytes must not be negative"):
        small_config(tmp_path, index_page_cache_window_bytes=-1)
    assert StoreConfig(root_dir=tmp_path).index_page_cache_window_bytes == 4 * 1024 * 1024
    of_store = IndexService.of_store(small_config(tmp_path, index_page_cache_window_bytes=8192))
    assert of_store.page_cache.window_bytes == 8192
    assert of_store.index_dir == tmp_path / "index"
    with pytest.raises(ValueError, match="window_bytes must not be negative"):
        IndexPageCacheWindow(-1)
    for step in (0, -PAGE_SIZE, PAGE_SIZE + 1):
        with pytest.raises(ValueError, match="align_bytes must be a positive multiple"):
            IndexPageCacheWindow(WINDOW, align_bytes=step)


# --------------------------------------------------------------------------- the store


def put_keyed(store: MessageStore, count: int, prefix: str = "U-") -> dict[str, int]:
    """``count`` messages, each with a unique UNIQ_KEY; key -> CommitLog offset."""
    offsets = {}
    for start in range(0, count, 500):
        keys = [f"{prefix}{i}" for i in range(start, min(start + 500, count))]
        msgs = [
            StoreMessage(topic=TOPIC, body=k.encode(), properties={"UNIQ_KEY": k}) for k in keys
        ]
        for key, result in zip(keys, store.put_messages(msgs), strict=True):
            assert result.status == PutStatus.PUT_OK, result
            offsets[key] = result.commitlog_offset
    assert store.wait_dispatched()
    return offsets


def found(store: MessageStore, keys: list[str]) -> dict[str, list[int]]:
    return {key: [m.commitlog_offset for m in store.query_messages(TOPIC, key)] for key in keys}


def test_store_releases_full_index_files_and_queries_survive_restart_and_crash(
    tmp_path: Path,
) -> None:
    # small_config: 1,000 slots and 3,999 entries per index file (84,040 bytes).
    settings = dict(
        index_page_cache_window_bytes=PAGE_SIZE,
        flush_interval_consume_queue_ms=20,
        flush_consume_queue_least_pages=0,
    )
    root = tmp_path / "store"
    store = open_store(root, **settings)
    offsets = put_keyed(store, 9000)  # two full index files and a third begun
    keys = [f"U-{i}" for i in range(0, 9000, 37)] + ["U-3998", "U-3999", "U-8999"]
    expected = {key: [offsets[key]] for key in keys}
    assert found(store, keys) == expected
    # Those lookups may have brought released pages back: sweep them soon.
    store.index.page_cache.sweep.interval_s = 0.05
    index_dir = root / "index"
    wait_until(
        lambda: [any(pages) for pages in resident(index_dir)] == [False, False, True],
        "the store to release its two full index files",
    )
    assert found(store, keys) == expected  # from released pages
    assert store.verify() == []
    wait_until(
        lambda: not any(resident(index_dir)[0]),
        "the sweep to release the index pages the lookups brought back",
    )
    store.shutdown()

    store = open_store(root, **settings)
    assert found(store, keys) == expected  # after a restart
    more = put_keyed(store, 500, "V-")  # some not yet flushed when it crashes
    crash(store)

    store = open_store(root, **settings)
    assert found(store, keys) == expected  # after crash recovery
    assert found(store, list(more)) == {key: [offset] for key, offset in more.items()}
    assert store.verify() == []
    store.shutdown()
