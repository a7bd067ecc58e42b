"""Each consume queue's page-cache window (services/store/page_cache.py, consume_queue.py).

Residency is checked independently of the store, with mincore(2) on a fresh
mapping of the queue's files (tests/page_residency.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from boltmq.kernel.config import ConfigError
from services.store import MessageStore, StoreMessage, page_cache
from services.store.config import StoreConfig
from services.store.consume_queue import ENTRY_SIZE, ConsumeQueue, ConsumeQueueTable
from services.store.mapped_file import PAGE_SIZE, MappedFile
from services.store.page_cache import CONSUME_QUEUE_RELEASE_ALIGN_BYTES
from tests.conftest import read_queue, small_config
from tests.page_residency import resident_pages
from tests.waiting import wait_until

PER_FILE = 40_000
"""Entries per file: 800,000 bytes, not a whole number of pages (as the default size)."""
FILE_BYTES = PER_FILE * ENTRY_SIZE
WINDOW = 64 * 1024


def write_entries(cq: ConsumeQueue, first: int, count: int) -> None:
    """Entries ``first .. first + count``: entry k points at ``k * 100``, 100 bytes."""
    for start in range(first, first + count, 10_000):
        n = min(10_000, first + count - start)
        offsets = np.arange(start, start + n, dtype=np.int64) * 100
        cq.put_run(start, offsets, np.full(n, 100, dtype=np.int64), [7] * n, 1)


def expected_offsets(first: int, count: int) -> list[int]:
    return [k * 100 for k in range(first, first + count)]


def read_offsets(cq: ConsumeQueue, first: int, count: int) -> list[int]:
    offsets, sizes = cq.entry_columns(first, count)
    assert set(sizes.tolist()) == {100}
    return [int(o) for o in offsets]


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumeQueueTable]:
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE_BYTES, WINDOW)
    yield table
    table.close()


def three_files_and_a_bit(table: ConsumeQueueTable) -> ConsumeQueue:
    """Queue T/0 with three files full and 1,000 entries in a fourth, flushed."""
    cq = table.get_or_create("T", 0)
    write_entries(cq, 0, 3 * PER_FILE + 1000)
    table.flush(0)
    return cq


def test_old_files_are_released_once_writes_pass_the_window(table: ConsumeQueueTable) -> None:
    cq = three_files_and_a_bit(table)
    files = cq.files.files
    assert all(all(resident_pages(mf.path)) for mf in files[:3])  # written: all cached

    released = table.release_behind()

    # Released up to the last 256 KiB step at least WINDOW behind the flushed end:
    # that lies in the third file, whose pages after it stay, as do the fourth's.
    flushed = cq.files.flushed_offset
    step = CONSUME_QUEUE_RELEASE_ALIGN_BYTES
    edge = 2 * FILE_BYTES + (flushed - WINDOW - 2 * FILE_BYTES) // step * step
    assert cq.page_cache.released_to == edge
    assert released == edge  # every byte before the edge, each file's partial last page too
    assert not any(resident_pages(files[0].path)) and not any(resident_pages(files[1].path))
    third = resident_pages(files[2].path)
    assert all(third[(edge - 2 * FILE_BYTES) // PAGE_SIZE :])
    assert any(resident_pages(files[3].path))


def test_released_entries_read_back_and_a_sweep_releases_them_again(
    table: ConsumeQueueTable,
) -> None:
    cq = three_files_and_a_bit(table)
    table.release_behind()
    first = cq.files.files[0]
    assert not any(resident_pages(first.path))

    total = 3 * PER_FILE + 1000
    assert read_offsets(cq, 0, total) == expected_offsets(0, total)  # faulted back in
    assert cq.entry(123) == (12_300, 100, 7)
    assert all(resident_pages(first.path))

    assert table.release_behind() == 0  # nothing new flushed, no sweep due: no call
    assert all(resident_pages(first.path))
    cq.page_cache.sweep_interval_s = 0.0
    assert table.release_behind() == cq.page_cache.released_to
    assert not any(resident_pages(first.path))
    assert read_offsets(cq, PER_FILE - 5, 10) == expected_offsets(PER_FILE - 5, 10)


def test_unflushed_entries_are_never_released(table: ConsumeQueueTable) -> None:
    cq = three_files_and_a_bit(table)
    write_entries(cq, 3 * PER_FILE + 1000, 20_000)  # into the fourth file, not flushed
    last = cq.files.files[3]
    flushed_page = last.flushed_position // PAGE_SIZE

    # Asked to release far past everything: only the flushed pages go.
    cq.page_cache.release_behind(10 * FILE_BYTES)

    fourth = resident_pages(last.path)
    written_end = -(-last.wrote_position // PAGE_SIZE)
    assert not any(fourth[:flushed_page])
    assert all(fourth[flushed_page:written_end])  # the flushed end's page and what follows
    first, count = 3 * PER_FILE, 21_000
    assert read_offsets(cq, first, count) == expected_offsets(first, count)


def test_a_window_of_zero_releases_nothing(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE_BYTES, 0)
    cq = three_files_and_a_bit(table)
    assert table.release_behind() == 0
    assert cq.page_cache.released_to == 0
    assert all(resident_pages(cq.files.files[0].path))
    table.close()


def test_store_config_validates_the_consume_queue_window(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="consume_queue_page_cache_window_bytes"):
        small_config(tmp_path, consume_queue_page_cache_window_bytes=-1)
    assert StoreConfig(root_dir=tmp_path).consume_queue_page_cache_window_bytes == 256 * 1024

    def table_of(window: int) -> ConsumeQueueTable:
        return ConsumeQueueTable.of_store(
            small_config(tmp_path, consume_queue_page_cache_window_bytes=window)
        )

    assert table_of(0).window_bytes == 0
    on = table_of(8)
    assert on.window_bytes == 8 and on.root == tmp_path / "consumequeue"
    assert on.get_or_create("T", 3).page_cache.window_bytes == 8
    on.close()


def test_many_queues_cost_no_call_when_idle_and_sweep_at_different_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(page_cache, "time", SimpleNamespace(monotonic=lambda: now[0]))
    calls: Counter[Path] = Counter()
    real = MappedFile.drop_cached

    def counted(mf: MappedFile, start: int, end: int) -> int:
        calls[mf.path.parent] += 1
        return real(mf, start, end)

    monkeypatch.setattr(MappedFile, "drop_cached", counted)
    per_file = 1024  # 20 KiB files: each release step takes whole files
    table = ConsumeQueueTable(tmp_path / "consumequeue", per_file * ENTRY_SIZE, PAGE_SIZE)
    for queue_id in range(100):
        write_entries(table.get_or_create("Many", queue_id), 0, 2 * per_file + 500)
    table.flush(0)

    table.release_behind()  # each queue's first two files
    assert len(calls) == 100 and set(calls.values()) == {2}
    calls.clear()
    assert table.release_behind() == 0
    assert not calls  # nothing moved, no sweep due: not one system call

    swept_at: dict[Path, list[int]] = {}
    for second in range(1, 11):  # one round a second over one sweep interval
        now[0] += 1.0
        table.release_behind()
        for queue in calls:
            swept_at.setdefault(queue, []).append(second)
        calls.clear()
    assert sorted(len(rounds) for rounds in swept_at.values()) == [1] * 100  # each once
    per_round = Counter(rounds[0] for rounds in swept_at.values())
    assert len(per_round) >= 8 and max(per_round.values()) <= 25  # spread, never all at once
    table.close()


def test_store_flusher_releases_old_queue_files_and_serves_every_message(
    make_store: Callable[..., MessageStore],
) -> None:
    # 1,000-entry (20,000-byte) queue files; 2,500 messages fill two and a half.
    store = make_store(
        consume_queue_page_cache_window_bytes=PAGE_SIZE,
        flush_interval_consume_queue_ms=20,
        flush_consume_queue_least_pages=0,
    )
    bodies = [f"m{i}".encode() for i in range(2500)]
    for body in bodies:
        store.put_message(StoreMessage(topic="Queued", queue_id=0, body=body))
    cq = store.queues.get("Queued", 0)
    assert cq is not None
    wait_until(
        lambda: cq.page_cache.released_to >= 2 * 20_000,
        "the consume-queue flusher to release two files",
    )
    assert not any(resident_pages(cq.files.files[0].path))
    assert [body for _, _, body in read_queue(store, "Queued", 0)] == bodies
    assert store.verify() == []
    assert any(resident_pages(cq.files.files[0].path))  # the reads brought it back
    cq.page_cache.sweep_interval_s = 0.05
    wait_until(
        lambda: not any(resident_pages(cq.files.files[0].path)),
        "the sweep to release the queue pages the reads brought back",
    )


def test_window_refuses_a_step_or_phase_it_cannot_use(table: ConsumeQueueTable) -> None:
    files = table.get_or_create("T", 0).files
    for step in (0, -PAGE_SIZE, PAGE_SIZE + 1):
        with pytest.raises(ValueError, match="align_bytes must be a positive multiple"):
            page_cache.PageCacheWindow(files, WINDOW, align_bytes=step)
    for phase in (-0.1, 1.0):
        with pytest.raises(ValueError, match="sweep_phase must be in"):
            page_cache.PageCacheWindow(files, WINDOW, sweep_phase=phase)
