"""The CommitLog's page-cache window (services/store/page_cache.py).

Residency is checked independently of the store, with mincore(2) on a fresh
mapping of the segment file (tests/page_residency.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from boltmq.kernel.config import ConfigError
from services.store import MessageStore, StoreMessage, page_cache
from services.store.mapped_file import PAGE_SIZE, MappedFile, file_name
from services.store.mapped_file_queue import MappedFileQueue
from services.store.page_cache import RELEASE_ALIGN_BYTES, PageCacheWindow
from services.store.status import GetStatus
from tests.conftest import read_queue, small_config
from tests.page_residency import resident_pages
from tests.waiting import wait_until

SEGMENT_BYTES = 64 * 1024


def written_segment(tmp_path: Path, flushed: int, unflushed: int = 0) -> MappedFile:
    mf = MappedFile(tmp_path / file_name(0), SEGMENT_BYTES, create=True)
    data = os.urandom(flushed + unflushed)
    mf.write_at(0, data[:flushed])
    mf.wrote_position = mf.committed_position = flushed
    mf.flush()
    if unflushed:
        mf.write_at(flushed, data[flushed:])
        mf.wrote_position = mf.committed_position = flushed + unflushed
    return mf


def test_drop_cached_releases_flushed_pages_and_the_bytes_stay_readable(tmp_path: Path) -> None:
    mf = written_segment(tmp_path, 16 * PAGE_SIZE)
    before = bytes(mf.view[: 16 * PAGE_SIZE])
    assert all(resident_pages(mf.path)[:16])

    assert mf.drop_cached(0, 16 * PAGE_SIZE) == 16 * PAGE_SIZE

    assert not any(resident_pages(mf.path)[:16])
    assert bytes(mf.view[: 16 * PAGE_SIZE]) == before  # faulted back in from the file
    mf.close()


def test_drop_cached_never_releases_past_the_flushed_position(tmp_path: Path) -> None:
    # 10,000 bytes flushed: pages 0 and 1 are whole, page 2 holds the flushed end.
    mf = written_segment(tmp_path, 10_000, unflushed=3 * PAGE_SIZE)

    assert mf.drop_cached(0, SEGMENT_BYTES) == 2 * PAGE_SIZE

    assert all(resident_pages(mf.path)[2:5])  # the flushed end's page and the unflushed pages
    mf.close()


def test_drop_cached_rounds_the_start_down_and_ignores_empty_ranges(tmp_path: Path) -> None:
    mf = written_segment(tmp_path, 8 * PAGE_SIZE)
    assert mf.drop_cached(5 * PAGE_SIZE, 5 * PAGE_SIZE) == 0
    assert mf.drop_cached(6 * PAGE_SIZE, 4 * PAGE_SIZE) == 0
    assert mf.drop_cached(PAGE_SIZE + 100, 3 * PAGE_SIZE) == 2 * PAGE_SIZE
    assert all(resident_pages(mf.path)[3:8])  # outside the range: untouched
    mf.close()


def test_drop_cached_on_a_destroyed_file_does_nothing(tmp_path: Path) -> None:
    mf = written_segment(tmp_path, 8 * PAGE_SIZE)
    mf.destroy()
    assert mf.drop_cached(0, 8 * PAGE_SIZE) == 0


def filled_queue(
    tmp_path: Path, segments: int, segment_bytes: int = SEGMENT_BYTES
) -> MappedFileQueue:
    queue = MappedFileQueue(tmp_path / "commitlog", segment_bytes)
    for n in range(segments):
        mf = queue.create_file(n * segment_bytes)
        mf.write_at(0, os.urandom(segment_bytes))
        mf.wrote_position = mf.committed_position = segment_bytes
        mf.flush()
    return queue


def test_window_releases_whole_segments_behind_it(tmp_path: Path) -> None:
    queue = filled_queue(tmp_path, 3)
    # The window's edge falls inside the second segment; segments under 2 MiB are
    # released whole, so only the first one goes.
    window = PageCacheWindow(queue, window_bytes=SEGMENT_BYTES + 8 * PAGE_SIZE)
    flushed = 3 * SEGMENT_BYTES

    assert window.release_behind(flushed) == SEGMENT_BYTES

    assert window.released_to == SEGMENT_BYTES
    first, second, third = (resident_pages(mf.path) for mf in queue.files)
    assert not any(first)
    assert all(second) and all(third)
    assert window.release_behind(flushed) == 0  # nothing new behind the window
    queue.close()


def test_window_edge_inside_a_segment_ends_on_a_2_mib_boundary(tmp_path: Path) -> None:
    segment = 2 * RELEASE_ALIGN_BYTES
    queue = filled_queue(tmp_path, 1, segment_bytes=segment)
    window = PageCacheWindow(queue, window_bytes=segment // 4)  # edge at 3 MiB

    assert window.release_behind(segment) == RELEASE_ALIGN_BYTES

    resident = resident_pages(queue.files[0].path)
    boundary = RELEASE_ALIGN_BYTES // PAGE_SIZE
    assert not any(resident[:boundary])
    assert all(resident[boundary:])
    # The edge moves on by one page: still inside the same 2 MiB, nothing more to release.
    assert window.release_behind(segment + PAGE_SIZE) == 0
    queue.close()


def test_window_sweep_releases_pages_a_reader_brought_back(tmp_path: Path) -> None:
    queue = filled_queue(tmp_path, 2)
    window = PageCacheWindow(queue, window_bytes=SEGMENT_BYTES, sweep_interval_s=0.0)
    window.release_behind(2 * SEGMENT_BYTES)
    first = queue.files[0]
    bytes(first.view[: PAGE_SIZE * 4])  # a late reader faults four pages back in
    assert any(resident_pages(first.path))

    assert window.release_behind(2 * SEGMENT_BYTES) == SEGMENT_BYTES

    assert not any(resident_pages(first.path))
    queue.close()


def test_window_zero_is_off_and_a_negative_window_is_refused(tmp_path: Path) -> None:
    queue = filled_queue(tmp_path, 2)
    off = PageCacheWindow(queue, window_bytes=0)
    assert not off.enabled
    assert off.release_behind(2 * SEGMENT_BYTES) == 0
    assert all(resident_pages(queue.files[0].path))
    with pytest.raises(ValueError, match="must not be negative"):
        PageCacheWindow(queue, window_bytes=-1)
    queue.close()


def test_store_config_refuses_a_negative_window(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="commitlog_page_cache_window_bytes"):
        small_config(tmp_path, commitlog_page_cache_window_bytes=-4096)


def released_store(
    make_store: Callable[..., MessageStore], topic: str
) -> tuple[MessageStore, list[bytes]]:
    """A store of one-segment window holding 400 messages of ``topic`` (~300 KiB: five
    segments), once its flusher has released the first three; the store and the bodies."""
    store = make_store(
        commitlog_page_cache_window_bytes=SEGMENT_BYTES, flush_interval_commitlog_ms=20
    )
    bodies = [f"message-{i}|".encode() * 60 for i in range(400)]
    for body in bodies:
        store.put_message(StoreMessage(topic=topic, queue_id=0, body=body))
    wait_until(
        lambda: store.commitlog.page_cache.released_to >= 3 * SEGMENT_BYTES,
        "the flusher to release three segments",
    )
    return store, bodies


def test_store_releases_old_segments_and_still_serves_every_message(
    make_store: Callable[..., MessageStore],
) -> None:
    store, bodies = released_store(make_store, "Window")
    window = store.commitlog.page_cache
    assert not any(resident_pages(store.commitlog.files.files[0].path))

    assert [body for _, _, body in read_queue(store, "Window", 0)] == bodies
    assert store.verify() == []

    # Reading brought the first segment back; with nothing more written, the flusher's
    # sweep still releases it again.
    assert any(resident_pages(store.commitlog.files.files[0].path))
    window.sweep_interval_s = 0.05
    wait_until(
        lambda: not any(resident_pages(store.commitlog.files.files[0].path)),
        "the sweep to release the pages the reads brought back",
    )


def test_read_ahead_brings_released_pages_back_without_touching_them(tmp_path: Path) -> None:
    mf = written_segment(tmp_path, 16 * PAGE_SIZE)
    mf.drop_cached(0, 16 * PAGE_SIZE)
    assert not any(resident_pages(mf.path)[:16])

    assert mf.read_ahead(2 * PAGE_SIZE + 100, 6 * PAGE_SIZE) == 4 * PAGE_SIZE

    wait_until(lambda: all(resident_pages(mf.path)[2:6]), "the kernel to read pages 2-5")
    assert not any(resident_pages(mf.path)[6:16])  # only what was asked for
    assert mf.read_ahead(5 * PAGE_SIZE, 5 * PAGE_SIZE) == 0
    assert mf.read_ahead(SEGMENT_BYTES - PAGE_SIZE, 2 * SEGMENT_BYTES) == PAGE_SIZE  # file end
    mf.destroy()
    assert mf.read_ahead(0, PAGE_SIZE) == 0


def released_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: float
) -> tuple[MappedFileQueue, PageCacheWindow]:
    """Three segments, the first two released; reads ahead of four pages."""
    monkeypatch.setattr(page_cache, "READ_AHEAD_BYTES", 4 * PAGE_SIZE)
    queue = filled_queue(tmp_path, 3)
    window = PageCacheWindow(queue, window_bytes=SEGMENT_BYTES, **kwargs)
    window.release_behind(3 * SEGMENT_BYTES)
    assert window.released_to == 2 * SEGMENT_BYTES
    return queue, window


def test_window_reads_ahead_of_a_read_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, window = released_window(tmp_path, monkeypatch)
    first = queue.files[0]

    assert window.read_ahead(0, PAGE_SIZE) == 5 * PAGE_SIZE  # the read and 4 pages past it

    wait_until(lambda: all(resident_pages(first.path)[:5]), "the kernel to read ahead")
    assert not any(resident_pages(first.path)[5:])
    assert not any(resident_pages(queue.files[1].path))
    queue.close()


def test_window_asks_once_per_step_of_one_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, window = released_window(tmp_path, monkeypatch)
    assert window.read_ahead(0, PAGE_SIZE) == 5 * PAGE_SIZE
    # The next read lies in what was asked for, with half a step to spare: nothing.
    assert window.read_ahead(PAGE_SIZE, 3 * PAGE_SIZE) == 0
    # Closer to the end of it: only the pages after it, up to a step past the read.
    assert window.read_ahead(3 * PAGE_SIZE, 4 * PAGE_SIZE) == 3 * PAGE_SIZE
    # A read elsewhere starts over from where it begins, across segments.
    assert window.read_ahead(SEGMENT_BYTES - PAGE_SIZE, SEGMENT_BYTES) == 5 * PAGE_SIZE
    queue.close()


def test_window_reads_ahead_at_most_two_steps_of_a_sparse_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One queue's records can lie far apart (the bytes between are other topics'):
    # a read from page 0 to page 40 asks for its first step and one more, not 44 pages.
    queue, window = released_window(tmp_path, monkeypatch)
    assert window.read_ahead(0, 40 * PAGE_SIZE) == 8 * PAGE_SIZE

    wait_until(lambda: all(resident_pages(queue.files[0].path)[:8]), "the read ahead")
    assert not any(resident_pages(queue.files[0].path)[8:])
    # The next reads of that range: nothing while what was asked covers theirs but half
    # a step, then only the pages after it, up to two steps past their start.
    assert window.read_ahead(PAGE_SIZE, 40 * PAGE_SIZE) == 0
    assert window.read_ahead(3 * PAGE_SIZE, 40 * PAGE_SIZE) == 3 * PAGE_SIZE
    queue.close()


def test_window_reads_ahead_only_what_it_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, window = released_window(tmp_path, monkeypatch)
    assert window.read_ahead(2 * SEGMENT_BYTES, 2 * SEGMENT_BYTES + PAGE_SIZE) == 0  # cached
    # The step past a read just behind the window ends at the window's start.
    assert window.read_ahead(2 * SEGMENT_BYTES - PAGE_SIZE, 2 * SEGMENT_BYTES) == PAGE_SIZE
    off = PageCacheWindow(queue, window_bytes=0)
    assert off.read_ahead(0, PAGE_SIZE) == 0
    queue.close()


def test_window_sweep_forgets_what_was_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, window = released_window(tmp_path, monkeypatch, sweep_interval_s=0.0)
    assert window.read_ahead(0, PAGE_SIZE) == 5 * PAGE_SIZE
    wait_until(lambda: all(resident_pages(queue.files[0].path)[:5]), "the read ahead")

    window.release_behind(3 * SEGMENT_BYTES)  # the sweep drops the pages read ahead

    assert not any(resident_pages(queue.files[0].path))
    assert window.read_ahead(PAGE_SIZE, 2 * PAGE_SIZE) == 5 * PAGE_SIZE  # so they are asked again
    queue.close()


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "decoded"])
def test_store_reads_ahead_of_a_read_behind_the_window(
    make_store: Callable[..., MessageStore], raw: bool
) -> None:
    store, bodies = released_store(make_store, "Ahead")
    window = store.commitlog.page_cache
    asked: list[tuple[int, int, int]] = []
    read_ahead = window.read_ahead

    def recording(offset: int, end: int) -> int:
        got = read_ahead(offset, end)
        asked.append((offset, end, got))
        return got

    window.read_ahead = recording  # type: ignore[method-assign]

    got = store.get_messages("Ahead", 0, 0, 8, raw=raw)

    assert got.status is GetStatus.FOUND and (got.raw_count if raw else len(got.messages)) == 8
    assert asked[0][0] == 0 and asked[0][2] > 0  # from the first record (offset 0) on
    later = store.get_messages("Ahead", 0, 399, 1, raw=raw)  # inside the window: not asked
    assert later.status is GetStatus.FOUND and asked[-1][2] == 0
    assert [body for _, _, body in read_queue(store, "Ahead", 0)] == bodies
