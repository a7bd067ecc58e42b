"""The consume-queue flusher's rounds: the queues written since the last round, every
queue at a thorough round; the page-cache releases of a round (services/store/consume_queue.py,
flusher.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from services.store import MessageStore, StoreMessage
from services.store.consume_queue import ENTRY_SIZE, ConsumeQueue, ConsumeQueueTable
from services.store.mapped_file import PAGE_SIZE
from services.store.page_cache import PageCacheWindow

PER_FILE = 4096
"""Entries a file: 80 KiB, twenty pages."""


def write(cq: ConsumeQueue, count: int) -> None:
    """``count`` more entries at the queue's end (entry k points at ``k * 100``)."""
    first = cq.max_offset()
    offsets = np.arange(first, first + count, dtype=np.int64) * 100
    cq.put_run(first, offsets, np.full(count, 100, dtype=np.int64), [0] * count, 1)


def dirty(cq: ConsumeQueue) -> bool:
    return cq.files.flushed_offset < cq.files.max_offset


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumeQueueTable]:
    table = ConsumeQueueTable(tmp_path / "consumequeue", PER_FILE * ENTRY_SIZE, PAGE_SIZE)
    yield table
    table.close()


def test_a_round_flushes_the_queues_noted_written_and_a_thorough_one_every_queue(
    table: ConsumeQueueTable,
) -> None:
    noted, quiet = table.get_or_create("T", 0), table.get_or_create("T", 1)
    write(noted, 1000)  # 20,000 bytes: five pages
    write(quiet, 1000)  # written, never noted (as a write outside the dispatcher)
    table.written([("T", 0)])

    assert table.flush(2) == [noted]
    assert not dirty(noted) and dirty(quiet)
    assert table.flush(2) == []  # nothing noted since: no queue walked

    assert set(table.flush(0)) == {noted, quiet}  # thorough: every queue
    assert not dirty(quiet)


def test_a_queue_below_the_least_pages_waits_for_its_next_write_or_a_thorough_round(
    table: ConsumeQueueTable,
) -> None:
    cq = table.get_or_create("T", 0)
    write(cq, 1000)
    table.flush(0)
    write(cq, 10)  # 200 bytes: less than a page dirty
    table.written([("T", 0)])

    assert table.flush(4) == [cq] and dirty(cq)  # too few dirty pages: left
    assert table.flush(4) == [] and dirty(cq)  # not walked again for nothing
    write(cq, 1000)  # now five pages, noted by their write
    table.written([("T", 0)])
    assert table.flush(4) == [cq] and not dirty(cq)
    write(cq, 10)
    table.written([("T", 0)])
    assert table.flush(4) == [cq] and dirty(cq)
    assert cq in table.flush(0) and not dirty(cq)  # the thorough round takes it


def test_notes_of_queues_deleted_meanwhile_are_dropped(table: ConsumeQueueTable) -> None:
    table.written([("Gone", 3)])
    assert table.flush(1) == []


def test_a_round_releases_its_flushed_queues_and_a_share_of_all_in_turn(
    table: ConsumeQueueTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    queues = [table.get_or_create("Many", n) for n in range(10)]
    for cq in queues:
        write(cq, 3 * PER_FILE)
    table.flush(0)
    seen: Counter[int] = Counter()
    real = PageCacheWindow.release_behind

    def counted(window: PageCacheWindow, flushed_offset: int) -> int:
        seen[next(n for n, cq in enumerate(queues) if cq.page_cache is window)] += 1
        return real(window, flushed_offset)

    monkeypatch.setattr(PageCacheWindow, "release_behind", counted)
    assert table.release_behind() > 0  # without arguments: every queue
    assert seen == Counter(range(10))

    for _ in range(4):  # share 4: three queues a round, each once in four rounds
        seen.clear()
        table.release_behind([queues[9]], share=4)
        assert seen[9] >= 1  # the flushed queue, every round
        assert sum(seen.values()) == 1 + 3
    seen.clear()
    for _ in range(4):
        table.release_behind([], share=4)
    assert all(seen[n] >= 1 for n in range(10)) and max(seen.values()) <= 2


def test_the_store_notes_what_it_dispatches_for_the_next_round(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store(flush_interval_consume_queue_ms=60_000)  # no round of its own
    for n in range(500):  # 10,000 bytes of entries: two pages
        store.put_message(StoreMessage(topic="Noted", queue_id=0, body=f"m{n}".encode()))
    store.dispatcher.wait_dispatched(store.commitlog.max_offset, 5.0)
    cq = store.queues.get("Noted", 0)
    assert cq is not None and dirty(cq)
    assert store.queue_flusher is not None
    assert store.queue_flusher.flush_now(1) == [cq]
    assert not dirty(cq)
