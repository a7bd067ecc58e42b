"""MessageStore.verify() beside writers, and on a store with a damaged file.

verify() checks what was dispatched when it started (services/store/verify.py):
a put landing mid-walk must never show up as a problem, while real damage must.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from services.store import MessageStore, StoreConfig
from services.store.consume_queue import ENTRY_SIZE
from services.store.verify import open_offline, verify_directory
from tests.unit.store.store_api_helpers import put_ok, sample

MakeStore = Callable[..., MessageStore]
ROUNDS = 300
BATCH = 5


def writer(
    store: MessageStore,
    go: threading.Semaphore,
    begun: threading.Semaphore,
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """One single put and one batch over three queues per round the verifier starts.

    Lockstep keeps the store (and so each verify walk) small while every round
    still has writes landing during its walk: the writer says it has begun the
    round before it puts, and the verifier waits for that before it walks, so a
    busy machine cannot leave the writer unscheduled for the whole test.
    """
    i = 0
    try:
        while go.acquire() and not stop.is_set():
            begun.release()
            store.put_message(sample(i, queue_id=i % 3))
            store.put_messages([sample(i + k, queue_id=(i + k) % 3) for k in range(BATCH)])
            i += BATCH + 1
    except BaseException as exc:  # the test fails on any writer error
        errors.append(exc)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_verify_beside_a_writer_never_reports_a_problem(make_store: MakeStore, flush: str) -> None:
    store = make_store(flush_disk_type=flush, mapped_file_size_commitlog=1024 * 1024)
    put_ok(store, [sample(i) for i in range(10)])
    go, begun, stop, errors = threading.Semaphore(0), threading.Semaphore(0), threading.Event(), []
    thread = threading.Thread(target=writer, args=(store, go, begun, stop, errors), daemon=True)
    thread.start()
    reports = []
    try:
        for _ in range(ROUNDS):
            go.release()
            assert begun.acquire(timeout=60), "the writer did not begin its round"
            reports.append(store.verify())
    finally:
        stop.set()
        go.release()
        thread.join()
    assert errors == []
    assert [r for r in reports if r] == []
    assert store.wait_dispatched()
    assert store.max_offset("T", 0) >= 10 + ROUNDS  # every round's single put is on queue 0
    assert store.verify() == []


def _damage_queue_entry(root: Path) -> None:
    path = sorted((root / "consumequeue" / "T" / "0").iterdir())[0]
    data = bytearray(path.read_bytes())
    offset = 3 * ENTRY_SIZE + 8  # entry 3's size field (commitlog offset: 8 bytes first)
    data[offset : offset + 4] = (999).to_bytes(4, "big")
    path.write_bytes(bytes(data))


def _damage_commitlog_byte(root: Path, body: bytes) -> None:
    path = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(path.read_bytes())
    data[data.index(body)] ^= 0xFF  # a body byte: the record's CRC no longer matches
    path.write_bytes(bytes(data))


def test_a_damaged_queue_entry_is_still_reported(make_store: MakeStore, tmp_path: Path) -> None:
    store = make_store()
    put_ok(store, [sample(i) for i in range(10)])
    store.shutdown()
    _damage_queue_entry(store.root)
    problems = verify_directory(store.root)
    assert any("T/0@3" in line for line in problems), problems
    store.start()
    assert any("T/0@3" in line for line in store.verify()), "running store misses the damage"


def test_a_damaged_commitlog_byte_is_still_reported(make_store: MakeStore) -> None:
    store = make_store()
    put_ok(store, [sample(i) for i in range(10)])
    store.shutdown()
    _damage_commitlog_byte(store.root, sample(4).body)
    problems = verify_directory(store.root)
    assert any("commitlog" in line for line in problems), problems


def test_a_stopped_store_verifies_clean_whatever_its_index_geometry(make_store: MakeStore) -> None:
    """The index files do not record their slot and entry counts: verify_directory (the
    default configuration) reads them from the files' size, so a store that ran with
    small index files (several of them here) is not reported as missing every key."""
    store = make_store(max_hash_slot_num=10, max_index_num=40)
    put_ok(store, [sample(i) for i in range(60)])  # two keys each: four index files
    files = len(store.index.files)
    assert files > 1
    store.shutdown()
    assert verify_directory(store.root) == []
    _, _, index = open_offline(store.root, StoreConfig(root_dir=store.root))
    try:  # every file opened, so the check above looked each key up
        assert len(index.files) == files
        assert index.query("T", "key-7", 10, 0, 1 << 62)
    finally:
        index.close()
