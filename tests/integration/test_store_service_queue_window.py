"""A store process keeps only each consume queue's newest pages (its page-cache window).

``consume_queue_page_cache_window_bytes``: after each consume-queue flush round the
store releases a queue's pages behind its flushed end less the window
(services/store/page_cache.py). Here the store process writes 2,500 entries to a
queue of 1,000-entry files; its first files leave the page cache (asked of the
kernel from this process, with mincore) and every message still reads back.
Settings the store cannot use stop it at start with an error naming the setting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq.v1 import message_pb2, store_pb2
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

TOPIC = "Backlog"


def test_old_queue_files_leave_the_page_cache_and_read_back(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    stub = connect(
        start_store(
            spawn,
            root,
            "consume_queue_page_cache_window_bytes=4096",
            "flush_interval_consume_queue_ms=50",
            "flush_consume_queue_least_pages=0",
        )
    )
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


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("-4096", "consume_queue_page_cache_window_bytes must not be negative"),
        ("lots", "consume_queue_page_cache_window_bytes"),
    ],
)
def test_a_bad_window_stops_the_store_at_start(
    spawn: Spawn, tmp_path: Path, value: str, error: str
) -> None:
    with pytest.raises(LaunchError, match="did not start") as failed:
        start_store(spawn, tmp_path / "s", f"consume_queue_page_cache_window_bytes={value}")
    assert error in str(failed.value)
    assert "Traceback" not in str(failed.value)
