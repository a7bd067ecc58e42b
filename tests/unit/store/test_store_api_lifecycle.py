"""MessageStore lifecycle: a store that never started or was shut down, locks, restarts.

Puts on a stopped store are refused and reads raise ``StoreNotRunning``; a
second start or a second store on the same root is refused; a restarted store
(a new object or the same one) serves exactly what it served before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from services.store import MessageStore, PutResult, PutStatus, StoreLocked
from services.store.errors import StoreNotRunning
from tests.conftest import small_config
from tests.unit.store.store_api_helpers import (
    STORE_HOST_HEX,
    disk_snapshot,
    fields,
    put_ok,
    read_queue,
    sample,
)

OPERATIONS: dict[str, Callable[[MessageStore], object]] = {
    "get_messages": lambda s: s.get_messages("T", 0, 0),
    "look_message": lambda s: s.look_message(0),
    "view_message": lambda s: s.view_message(f"{STORE_HOST_HEX}{0:016X}"),
    "query_messages": lambda s: s.query_messages("T", "key-0"),
    "offset_by_time": lambda s: s.offset_by_time("T", 0, 0),
    "min_offset": lambda s: s.min_offset("T", 0),
    "max_offset": lambda s: s.max_offset("T", 0),
    "flush": lambda s: s.flush(),
    "verify": lambda s: s.verify(),
}


def test_puts_on_a_store_that_never_started_are_refused(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    for result in [store.put_message(sample(0)), *store.put_messages([sample(1), sample(2)])]:
        assert result.status == PutStatus.SERVICE_NOT_AVAILABLE
        assert "not running" in result.error
    assert not (tmp_path / "store").exists()


def test_puts_on_a_store_that_was_shut_down_are_refused(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    store = make_store()
    put_ok(store, [sample(0)])
    store.shutdown()
    before = disk_snapshot(tmp_path)
    result = store.put_message(sample(1))
    assert result.status == PutStatus.SERVICE_NOT_AVAILABLE and "not running" in result.error
    assert disk_snapshot(tmp_path) == before


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_reads_on_a_store_that_never_started_raise(tmp_path: Path, operation: str) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    with pytest.raises(StoreNotRunning):
        OPERATIONS[operation](store)


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_reads_on_a_store_that_was_shut_down_raise(
    make_store: Callable[..., MessageStore], operation: str
) -> None:
    store = make_store()
    put_ok(store, [sample(0)])
    store.shutdown()
    with pytest.raises(StoreNotRunning):
        OPERATIONS[operation](store)


def test_start_twice_and_a_second_store_on_the_root_are_refused(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    store = make_store()
    with pytest.raises(RuntimeError, match="already started"):
        store.start()
    other = MessageStore(small_config(store.root))
    with pytest.raises(StoreLocked):
        other.start()
    assert put_ok(store, [sample(0)])[0].queue_offset == 0  # the first store is unharmed
    assert store.verify() == []


def snapshot_reads(
    store: MessageStore, results: Sequence[PutResult], queues: Sequence[tuple[str, int]]
) -> dict[str, object]:
    """What every read path says about the store's messages."""
    return {
        "queues": {q: read_queue(store, *q) for q in queues},
        "bounds": {q: (store.min_offset(*q), store.max_offset(*q)) for q in queues},
        "look": [fields(store.look_message(r.commitlog_offset)) for r in results],
        "view": [fields(store.view_message(r.msg_id)) for r in results],
        "query": {
            key: sorted(m.commitlog_offset for m in store.query_messages("T", key))
            for key in ("key-0", "key-7", "UT000011", "key-999")
        },
        "by_time": [store.offset_by_time("T", 1, r.store_timestamp) for r in results],
    }


def test_a_restarted_store_serves_the_same_messages(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    msgs = [sample(i, queue_id=i % 3, body=f"{i}".encode() * (40 * i + 1)) for i in range(90)]
    msgs += [sample(i, topic="U", queue_id=7) for i in range(10)]
    results = put_ok(store, msgs)
    assert store.commitlog.max_offset > 2 * store.config.mapped_file_size_commitlog
    queues = [("T", 0), ("T", 1), ("T", 2), ("U", 7)]
    before = snapshot_reads(store, results, queues)
    assert before["query"]["key-7"] == [results[7].commitlog_offset]
    store.shutdown()

    store = make_store()
    assert snapshot_reads(store, results, queues) == before
    more = put_ok(store, [sample(1000, queue_id=q) for q in range(3)])
    assert [r.queue_offset for r in more] == [30, 30, 30]
    assert more[0].commitlog_offset == results[-1].commitlog_offset + results[-1].wrote_bytes
    assert store.verify() == []


def test_the_same_store_object_can_be_started_again(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    store.start()
    try:
        results = put_ok(store, [sample(i, queue_id=i % 2) for i in range(40)])
        before = snapshot_reads(store, results, [("T", 0), ("T", 1)])
        store.shutdown()
        store.start()
        assert snapshot_reads(store, results, [("T", 0), ("T", 1)]) == before
        assert put_ok(store, [sample(50)])[0].queue_offset == 20
        assert store.verify() == []
    finally:
        store.shutdown()
