"""Recovery keeps the CommitLog's page-cache window (services/store/recovery.py).

A store restarted after a crash walks and re-dispatches every segment from its
start; behind the walk and the re-dispatch, what lies more than the window behind
is released, so a starting store holds no more of the CommitLog than a running
one. Residency is asked of the kernel (tests/page_residency.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from services.store import MessageStore
from tests.page_residency import resident_pages
from tests.unit.store.recovery_helpers import (
    SEGMENT_BYTES,
    assert_served_exactly,
    crash,
    message,
    put_all,
)

WINDOW = 2 * SEGMENT_BYTES


@pytest.mark.parametrize("window", [WINDOW, 0], ids=["window", "off"])
def test_a_crash_recovery_releases_what_lies_behind_the_window(
    make_store: Callable[..., MessageStore], window: int
) -> None:
    store = make_store(commitlog_page_cache_window_bytes=0)  # everything stays cached
    written = put_all(store, [message(i) for i in range(600)])
    root = store.root
    crash(store)
    (root / "checkpoint").unlink()  # recovery walks and re-dispatches from the first segment
    segments = sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
    assert len(segments) >= 6
    for path in segments:  # every page cached, and clean (written back), before the restart
        with path.open("rb+") as f:
            f.read()
            os.fsync(f.fileno())

    store = make_store(root, commitlog_page_cache_window_bytes=window)
    report = store.recovery
    assert report is not None and report.clean is False and report.start_offset == 0
    if window:
        end = store.commitlog.max_offset
        assert report.released_bytes >= end - window - SEGMENT_BYTES  # all but the window
        behind = [p for p in segments if int(p.name) + SEGMENT_BYTES <= end - window]
        assert behind and not any(any(resident_pages(p)) for p in behind)
        last = store.commitlog.files.last_file()
        assert last is not None and any(resident_pages(last.path))  # the window stays
    else:
        assert report.released_bytes == 0
    assert_served_exactly(store, written)  # released pages read back from the files
