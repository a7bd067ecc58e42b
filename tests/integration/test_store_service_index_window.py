"""A store process keeps only the newest index entries mapped (the index's page-cache window).

``index_page_cache_window_bytes``: after each consume-queue flush round the store
releases the pages of index files that are full (services/store/index_window.py).
Here the store process indexes 9,000 messages, each with its own UNIQ_KEY (as the
SDK sends them), in index files of 3,999 entries: the two full files leave the page
cache (asked of the kernel from this process, with mincore) and QueryByKey still
finds every message it is asked for. Settings the store cannot use stop it at start
with an error naming the setting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq.v1 import store_pb2
from tests.integration.procs import LaunchError
from tests.integration.store_service_helpers import (
    OK,
    Spawn,
    append,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    msg,
    start_store,
)
from tests.page_residency import resident_pages
from tests.waiting import wait_until

TOPIC = "Keyed"


def test_full_index_files_leave_the_page_cache_and_keys_are_still_found(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    stub = connect(
        start_store(
            spawn,
            root,
            "index_page_cache_window_bytes=4096",
            "flush_interval_consume_queue_ms=50",
            "flush_consume_queue_least_pages=0",
        )
    )
    count = 9000
    for start in range(0, count, 500):
        batch = [
            msg(TOPIC, 0, f"m{i}".encode(), properties={"UNIQ_KEY": f"U-{i}"})
            for i in range(start, start + 500)
        ]
        assert {r.status for r in append(stub, *batch)} == {OK}
    index_dir = root / "index"

    def resident_files() -> list[bool]:
        return [any(resident_pages(p)) for p in sorted(index_dir.iterdir())]

    wait_until(
        lambda: resident_files() == [False, False, True],
        "the store to release its two full index files",
    )
    for i in [*range(0, count, 331), 3998, 3999, count - 1]:
        found = stub.QueryByKey(store_pb2.QueryByKeyRequest(topic=TOPIC, key=f"U-{i}"))
        assert [m.body for m in found.messages] == [f"m{i}".encode()], i
    assert resident_files()[0]  # the lookups faulted its pages back in


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("-1", "index_page_cache_window_bytes must not be negative"),
        ("4MiB", "index_page_cache_window_bytes"),
    ],
)
def test_a_bad_index_window_stops_the_store_at_start(
    spawn: Spawn, tmp_path: Path, value: str, error: str
) -> None:
    with pytest.raises(LaunchError, match="did not start") as failed:
        start_store(spawn, tmp_path / "s", f"index_page_cache_window_bytes={value}")
    assert error in str(failed.value)
    assert "Traceback" not in str(failed.value)
