"""A store process keeps only the newest pages of each consume queue and of its index.

``consume_queue_page_cache_window_bytes``: after each consume-queue flush round the
store releases a queue's pages behind its flushed end less the window
(services/store/page_cache.py). Here the store process writes 2,500 entries to a
queue of 1,000-entry files; its first files leave the page cache (asked of the
kernel from this process, with mincore) and every message still reads back.

``index_page_cache_window_bytes``: in the same rounds the store releases the pages of
index files that are full (services/store/index_window.py). The store indexes 9,000
messages, each with its own UNIQ_KEY (as the SDK sends them), in index files of
3,999 entries: the two full files leave the page cache and QueryByKey still finds
every message it is asked for.

Settings the store cannot use stop it at start with an error naming the setting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq.v1 import message_pb2, store_pb2
from tests.integration.procs import LaunchError, ServiceProcess
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

TOPIC = "Backlog"


def start_windowed(spawn: Spawn, root: Path, window: str) -> ServiceProcess:
    """A store whose ``window`` is one page, its queues and index flushed every 50 ms."""
    return start_store(
        spawn,
        root,
        f"{window}=4096",
        "flush_interval_consume_queue_ms=50",
        "flush_consume_queue_least_pages=0",
    )


def test_old_queue_files_leave_the_page_cache_and_read_back(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    stub = connect(start_windowed(spawn, root, "consume_queue_page_cache_window_bytes"))
    bodies = [f"entry-{i}".encode() for i in range(2500)]
    for start in range(0, len(bodies), 250):
        batch = [msg(TOPIC, 0, body) for body in bodies[start : start + 250]]
        assert {r.status for r in append(stub, *batch)} == {OK}
    queue_dir = root / "consumequeue" / TOPIC / "0"
    first, second = queue_dir / f"{0:020d}", queue_dir / f"{20_000:020d}"

    # Mapped and cached while written; released once the writes moved past the window.
    wait_until(
        lambda: not any(resident_pages(first)) and not any(resident_pages(second)),
        "the store to release the first two consume-queue files",
    )
    assert any(resident_pages(queue_dir / f"{40_000:020d}"))  # the newest: in the window

    read: list[bytes] = []
    offset = 0
    while offset < len(bodies):
        pulled = stub.Pull(store_pb2.PullRequest(topic=TOPIC, queue_id=0, queue_offset=offset))
        assert pulled.status == message_pb2.FOUND, (offset, pulled.status)
        read.extend(m.body for m in pulled.messages)
        offset = pulled.next_begin_offset
    assert read == bodies
    assert any(resident_pages(first))  # the pull faulted them back in


def test_full_index_files_leave_the_page_cache_and_keys_are_still_found(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    stub = connect(start_windowed(spawn, root, "index_page_cache_window_bytes"))
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
    ("setting", "value", "error"),
    [
        (
            "consume_queue_page_cache_window_bytes",
            "-4096",
            "consume_queue_page_cache_window_bytes must not be negative",
        ),
        ("consume_queue_page_cache_window_bytes", "lots", "consume_queue_page_cache_window_bytes"),
        (
            "index_page_cache_window_bytes",
            "-1",
            "index_page_cache_window_bytes must not be negative",
        ),
        ("index_page_cache_window_bytes", "4MiB", "index_page_cache_window_bytes"),
    ],
)
def test_a_bad_window_stops_the_store_at_start(
    spawn: Spawn, tmp_path: Path, setting: str, value: str, error: str
) -> None:
    with pytest.raises(LaunchError, match="did not start") as failed:
        start_store(spawn, tmp_path / "s", f"{setting}={value}")
    assert error in str(failed.value)
    assert "Traceback" not in str(failed.value)
