"""The bulk append of a raw batch (checked as columns, stamped with one numpy scatter,
dispatched as one DispatchRun) against the record-by-record path.

A batch of CHECK_COLUMNS_MIN records or more, all good and all fitting in the
current segment, takes the bulk path; smaller batches, batches with a refused
record and batches that cross a segment take the per-record one. Both must
leave the same bytes on disk and the same consume-queue entries.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from boltmq.wire.record import TOTAL_SIZE_OFFSET
from boltmq.wire.record_batch import MalformedBatch, frame_records
from boltmq.wire.record_heads import CHECK_COLUMNS_MIN, HEAD_DTYPE, CheckedColumns, check_batch
from services.store import MessageStore
from services.store.commitlog import AppendBatch
from services.store.consume_queue import ENTRY_SIZE, ConsumeQueue
from services.store.dispatch_run import DispatchRun
from services.store.status import PutStatus
from tests.unit.store.test_record_batch import (
    INT,
    TOPIC,
    bad_records,
    batch,
    patched,
    record,
)

MakeStore = Callable[..., MessageStore]
COUNT = 40
STORE_TIMESTAMP_OFFSET = HEAD_DTYPE.fields["store_timestamp"][1]  # the raw (IPv4) layout
assert COUNT >= CHECK_COLUMNS_MIN


def varied(count: int = COUNT) -> list[bytes]:
    """Records of different sizes, tags, keys and properties; every born time set."""
    return [
        record(
            bytes([65 + i % 26]) * (50 + 37 * i),
            tags=f"t{i % 3}",
            keys=[f"k{i}"] if i % 5 == 0 else [],
            properties={"n": str(i)} if i % 7 == 0 else {},
            born_timestamp_ms=1_700_000_000_000 + i,
        )
        for i in range(count)
    ]


def commitlog_bytes(store: MessageStore, store_timestamps_zeroed: bool = True) -> bytes:
    """The CommitLog's written bytes, every record's store timestamp zeroed (the only
    field that differs between two stores fed the same records at different times)."""
    data = bytearray()
    for mf in store.commitlog.files.files:
        data += bytes(mf.view[: mf.wrote_position])
    position = 0
    while store_timestamps_zeroed and position < len(data):
        total = INT.unpack_from(data, position + TOTAL_SIZE_OFFSET)[0]
        data[position + STORE_TIMESTAMP_OFFSET : position + STORE_TIMESTAMP_OFFSET + 8] = bytes(8)
        position += total
    return bytes(data)


def queue_entries(store: MessageStore, queue_id: int = 1) -> list[tuple[int, int, int]]:
    assert store.wait_dispatched()
    cq = store.queues.get(TOPIC, queue_id)
    assert cq is not None
    return [cq.entry(offset) for offset in range(cq.min_offset(), cq.max_offset())]  # type: ignore[misc]


def watch_appends(store: MessageStore) -> list[type]:
    """The kind of dispatch requests of each later append of ``store`` (a DispatchRun
    for the bulk path, a list for the per-record one)."""
    kinds: list[type] = []
    forward = store.commitlog.on_append
    assert forward is not None

    def seen(appended: AppendBatch) -> None:
        kinds.append(type(appended.requests))
        forward(appended)

    store.commitlog.on_append = seen
    return kinds


def test_a_big_batch_is_checked_as_columns_and_a_small_one_record_by_record() -> None:
    records = varied()
    good, bad = check_batch(batch(*records), 48 * 1024, 64 * 1024)
    assert isinstance(good, CheckedColumns) and not bad
    small, _ = check_batch(batch(*records[: CHECK_COLUMNS_MIN - 1]), 48 * 1024, 64 * 1024)
    assert not isinstance(small, CheckedColumns)
    # As a sequence the columns are the per-record tuples.
    assert list(good)[: CHECK_COLUMNS_MIN - 1] == list(small)


def test_the_bulk_path_writes_what_the_record_by_record_path_writes(
    make_store: MakeStore, tmp_path: Path
) -> None:
    records = varied()
    bulk = make_store(tmp_path / "bulk")
    one_by_one = make_store(tmp_path / "slow")
    paths = {id(bulk): watch_appends(bulk), id(one_by_one): watch_appends(one_by_one)}
    results = bulk.put_messages(batch(*records), ("10.1.2.3", 4567))
    slow_results = []
    for start in range(0, COUNT, CHECK_COLUMNS_MIN - 1):  # batches below CHECK_COLUMNS_MIN
        slow_results += one_by_one.put_messages(
            batch(*records[start : start + CHECK_COLUMNS_MIN - 1]), ("10.1.2.3", 4567)
        )
    assert paths[id(bulk)] == [DispatchRun]  # one append, the bulk one
    assert paths[id(one_by_one)] == [list] * len(range(0, COUNT, CHECK_COLUMNS_MIN - 1))
    assert [r.status for r in results] == [PutStatus.PUT_OK] * COUNT
    assert [(r.commitlog_offset, r.queue_offset, r.wrote_bytes, r.msg_id) for r in results] == [
        (r.commitlog_offset, r.queue_offset, r.wrote_bytes, r.msg_id) for r in slow_results
    ]
    assert commitlog_bytes(bulk) == commitlog_bytes(one_by_one)
    stamped = {r.store_timestamp for r in results}
    assert len(stamped) == 1
    bulk_entries = queue_entries(bulk)
    assert [(physical, size) for physical, size, _ in bulk_entries] == [
        (physical, size) for physical, size, _ in queue_entries(one_by_one)
    ]
    assert [code for _, _, code in bulk_entries] == [
        code for _, _, code in queue_entries(one_by_one)
    ]
    # Keys reach the index; tags filter; the store's own check passes.
    assert [m.msg_id for m in bulk.query_messages(TOPIC, "k10")] == [results[10].msg_id]
    tagged = bulk.get_messages(TOPIC, 1, 0, COUNT, subscription="t1").messages
    assert [m.queue_offset for m in tagged] == list(range(1, COUNT, 3))
    view = bulk.look_message(results[3].commitlog_offset)
    assert view is not None
    assert (view.queue_id, view.queue_offset, view.born_host, view.born_timestamp) == (
        1,
        3,
        "10.1.2.3:4567",
        1_700_000_000_003,
    )
    assert view.store_timestamp == results[3].store_timestamp
    assert bulk.verify() == [] and one_by_one.verify() == []


def test_a_born_time_of_zero_becomes_the_store_time_in_bulk(make_store: MakeStore) -> None:
    store = make_store()
    results = store.put_messages(batch(*[record(b"z" * 10) for _ in range(COUNT)]))
    first = store.look_message(results[0].commitlog_offset)
    assert first is not None and first.born_timestamp == results[0].store_timestamp


def test_bulk_batches_continue_a_queue_and_survive_a_restart(make_store: MakeStore) -> None:
    store = make_store()
    first = store.put_messages(batch(*varied(CHECK_COLUMNS_MIN)))
    second = store.put_messages(batch(*varied(CHECK_COLUMNS_MIN)))
    assert [r.queue_offset for r in [*first, *second]] == list(range(2 * CHECK_COLUMNS_MIN))
    root = store.config.root_dir
    store.shutdown()
    again = make_store(root)
    assert again.verify() == []
    assert [e[0] for e in queue_entries(again)] == [r.commitlog_offset for r in [*first, *second]]


@pytest.mark.parametrize("case", sorted(bad_records()))
def test_a_bad_record_in_a_big_batch_is_refused_as_in_a_small_one(
    make_store: MakeStore, case: str
) -> None:
    bad, status, reason = bad_records()[case]
    store = make_store()
    records = [record(b"before"), bad, *[record(bytes([i]) * 20) for i in range(COUNT)]]
    results = store.put_messages(batch(*records))
    assert [r.status for r in results] == [PutStatus.PUT_OK, status] + [PutStatus.PUT_OK] * COUNT
    assert reason in results[1].error and "records[1]" in results[1].error
    assert [r.queue_offset for r in results if r.status is PutStatus.PUT_OK] == list(
        range(COUNT + 1)
    )
    assert store.verify() == []


def test_a_record_too_big_for_a_segment_is_refused_in_a_big_batch() -> None:
    records = varied()
    good, bad = check_batch(batch(*records), 48 * 1024, len(records[5]) - 1)
    assert sorted(bad) == [i for i, raw in enumerate(records) if len(raw) >= len(records[5])]
    assert all("does not fit in a segment" in str(exc) for exc in bad.values())
    assert len(good) + len(bad) == COUNT


def test_a_big_batch_that_crosses_a_segment_is_stored_record_by_record(
    make_store: MakeStore,
) -> None:
    store = make_store()
    body = b"y" * 3000  # 64 KiB segments: 40 records need two
    results = store.put_messages(batch(*[record(body + bytes([i])) for i in range(COUNT)]))
    assert {r.commitlog_offset // (64 * 1024) for r in results} == {0, 1}
    assert [r.queue_offset for r in results] == list(range(COUNT))
    assert store.verify() == []


def test_equal_sizes_are_framed_at_once_and_anything_else_record_by_record() -> None:
    same = [record(bytes([i]) * 100) for i in range(COUNT)]
    size = len(same[0])
    assert frame_records(b"".join(same), COUNT) == list(range(0, size * COUNT, size))
    # Two records whose sizes add up to an even split: framed by their own sizes.
    short, long = record(b"a" * 10), record(b"b" * (10 + 2 * 16))
    assert (len(short) + len(long)) % 2 == 0
    assert frame_records(short + long, 2) == [0, len(short)]
    # Every size field but one says the even size: refused as the loop refuses it.
    lying = [*same[:-1], patched(same[-1], TOTAL_SIZE_OFFSET, size + 1)]
    with pytest.raises(MalformedBatch, match="records\\[39\\]"):
        frame_records(b"".join(lying), COUNT)


def test_a_run_of_entries_is_written_as_entry_by_entry_puts(tmp_path: Path) -> None:
    file_size = 8 * ENTRY_SIZE  # a run of 20 from offset 5 spans four files
    run = ConsumeQueue(tmp_path / "run", TOPIC, 0, file_size)
    single = ConsumeQueue(tmp_path / "single", TOPIC, 0, file_size)
    physicals = np.arange(20, dtype=np.int64) * 300 + 1000
    sizes = np.full(20, 300, dtype=np.int64)
    codes = [i * 7 - 50 for i in range(20)]
    run.put_run(5, physicals, sizes, codes, 42)
    for at in range(20):
        single.put(5 + at, int(physicals[at]), 300, codes[at], 42)
    for queue in (run, single):
        assert (queue.min_offset(), queue.max_offset()) == (5, 25)
        assert queue.max_physical_offset == int(physicals[-1]) + 300
        assert queue.last_store_timestamp == 42
    assert [run.entry(k) for k in range(5, 25)] == [single.entry(k) for k in range(5, 25)]
    assert [mf.path.name for mf in run.files.files] == [mf.path.name for mf in single.files.files]
    with pytest.raises(ValueError, match="below the last file"):
        run.put_run(0, physicals[:1], sizes[:1], codes[:1], 42)


def test_a_dispatch_run_reads_as_per_record_requests() -> None:
    run = DispatchRun(
        TOPIC,
        2,
        7,
        np.array([100, 200], dtype=np.int64),
        np.array([100, 150], dtype=np.int64),
        [5, 6],
        [(), ("k",)],
        np.array([0, 0], dtype=np.int32),
        99,
    )
    assert len(run) == 2
    assert list(run) == [
        (TOPIC, 2, 100, 100, 5, 99, 7, (), 0),
        (TOPIC, 2, 200, 150, 6, 99, 8, ("k",), 0),
    ]
    assert run[1][6] == 8
