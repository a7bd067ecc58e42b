"""Several raw batches appended in one engine call (``put_record_batches``) against the
same batches appended one by one (``put_messages`` each).

Both must leave the same CommitLog (every field but the store timestamp), the
same results (queue offsets continuing per topic and queue in batch order, the
same refusals), the same consume-queue and index entries; the dispatcher gets
one hand-off for the whole call.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import (
    PROPERTY_DELAY_MS,
    SCHEDULE_TOPIC,
    SYS_FLAG_OFFSET,
    SYS_FLAG_TRANSACTION_PREPARED,
)
from boltmq.wire.record_batch import RecordBatch
from boltmq.wire.record_heads import CHECK_COLUMNS_MIN
from services.store import MessageStore
from services.store.dispatch_run import DispatchParts, DispatchRun
from services.store.status import PutResult, PutStatus
from tests.conftest import quiet_disk, small_config
from tests.unit.store.test_bulk_append import commitlog_bytes, varied, watch_appends
from tests.unit.store.test_record_batch import bad_records, batch, patched, record

MakeStore = Callable[..., MessageStore]
Born = tuple[str, int] | None
V4 = ("10.1.2.3", 4567)
SEGMENT = 64 * 1024  # small_config's segments


def mixed_batches() -> list[tuple[RecordBatch, Born]]:
    """Batches of several topics and queues: refused records, a topic mismatch, a
    prepared (unconsumable) record, a bulk batch, and one that crosses a segment."""
    crc, _, _ = bad_records()["bad crc"]
    other_topic, _, _ = bad_records()["other topic"]
    prepared = patched(
        record(b"half", born_timestamp_ms=7), SYS_FLAG_OFFSET, SYS_FLAG_TRANSACTION_PREPARED
    )
    big = [record(b"y" * 3000 + bytes([i]), born_timestamp_ms=9) for i in range(20)]
    return [
        (batch(*varied(3)), V4),
        (batch(record(b"pay", topic="Payments", born_timestamp_ms=1), topic="Payments"), V4),
        (batch(record(b"a", born_timestamp_ms=2), crc, record(b"b", born_timestamp_ms=3)), V4),
        (batch(other_topic, other_topic, topic="Orders", queue_id=2), V4),
        (batch(*varied(CHECK_COLUMNS_MIN), queue_id=3), None),  # the bulk path; default born host
        (batch(record(b"c", born_timestamp_ms=4), prepared, record(b"d", born_timestamp_ms=5)), V4),
        (batch(*big, queue_id=0), V4),  # crosses the first segment's end
        (batch(*varied(2)), ("10.9.9.9", 1)),  # queue 1 of Orders again, after the cross
    ]


def one_by_one(store: MessageStore, batches: Sequence[tuple[RecordBatch, Born]]) -> list:
    return [list(store.put_messages(b, born)) for b, born in batches]


def together(store: MessageStore, batches: Sequence[tuple[RecordBatch, Born]]) -> list:
    results = store.put_record_batches([b for b, _ in batches], [born for _, born in batches])
    return [list(r) for r in results]


def outcome(result: PutResult) -> tuple:
    """Every field of a result but the store timestamp."""
    return (
        result.status,
        result.msg_id,
        result.commitlog_offset,
        result.queue_offset,
        result.wrote_bytes,
        result.error,
    )


def records_of(store: MessageStore) -> list[tuple]:
    """Every CommitLog record's fields but the store timestamp, in order (None: a blank)."""
    out: list[tuple] = []
    for offset, view in store.commitlog.walk(store.commitlog.min_offset, check_crc=True):
        if view is None:
            out.append((offset, None))
            continue
        out.append(
            (
                offset,
                view.topic,
                view.queue_id,
                view.queue_offset,
                view.total_size,
                view.sys_flag,
                view.flag,
                view.born_timestamp,
                view.born_host,
                view.store_host,
                bytes(view.body),
                dict(view.properties),
            )
        )
    return out


def queue_entries(store: MessageStore) -> dict[tuple[str, int], list]:
    assert store.wait_dispatched()
    return {
        (cq.topic, cq.queue_id): [cq.entry(o) for o in range(cq.min_offset(), cq.max_offset())]
        for cq in store.queues
    }


def assert_same_store(merged: MessageStore, separate: MessageStore) -> None:
    assert records_of(merged) == records_of(separate)
    assert queue_entries(merged) == queue_entries(separate)
    assert merged.commitlog.queue_offsets == separate.commitlog.queue_offsets
    assert merged.verify() == [] and separate.verify() == []


def test_batches_in_one_call_store_what_they_store_one_by_one(
    make_store: MakeStore, tmp_path: Path
) -> None:
    merged, separate = make_store(tmp_path / "merged"), make_store(tmp_path / "separate")
    for store in (merged, separate):  # queues that already hold records continue
        store.put_messages(batch(record(b"first", born_timestamp_ms=1)), V4)
    kinds = watch_appends(merged)
    batches = mixed_batches()

    got = together(merged, batches)
    expected = one_by_one(separate, batches)

    assert kinds == [DispatchParts]  # one lock hold, one hand-off to dispatch
    assert [[outcome(r) for r in rs] for rs in got] == [[outcome(r) for r in rs] for rs in expected]
    assert len({r.store_timestamp for rs in got for r in rs if r.status.stored}) == 1
    statuses = [[r.status for r in rs] for rs in got]
    assert statuses[2] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
    assert "records[1]" in got[2][1].error and "CRC" in got[2][1].error
    assert statuses[3] == [PutStatus.MESSAGE_ILLEGAL] * 2 and "topic" in got[3][0].error
    assert {r.commitlog_offset // SEGMENT for r in got[6]} == {0, 1}
    assert [r.queue_offset for r in got[0]] == [1, 2, 3]  # after "first"
    assert [r.queue_offset for r in got[2] if r.status.stored] == [4, 5]
    assert [r.queue_offset for r in got[5]] == [6, 0, 7]  # a prepared record takes none
    assert [r.queue_offset for r in got[7]] == [8, 9]  # Orders/1 continues in batch order
    assert commitlog_bytes(merged) == commitlog_bytes(separate)
    assert_same_store(merged, separate)
    # The index has the keys of the bulk batch and of the first one.
    assert [m.commitlog_offset for m in merged.query_messages("Orders", "k0")] == [
        m.commitlog_offset for m in separate.query_messages("Orders", "k0")
    ]
    assert len(merged.query_messages("Orders", "k0")) == 3  # batches 0, 4 and 7


def test_the_batches_survive_a_crash_as_they_do_one_by_one(
    make_store: MakeStore, tmp_path: Path
) -> None:
    merged, separate = make_store(tmp_path / "merged"), make_store(tmp_path / "separate")
    batches = mixed_batches()
    together(merged, batches)
    one_by_one(separate, batches)
    for store in (merged, separate):
        store.shutdown()
        (store.root / "abort").touch()  # the next start recovers as after a crash
        (store.root / "checkpoint").unlink()
    assert_same_store(make_store(tmp_path / "merged"), make_store(tmp_path / "separate"))


def test_an_ipv6_born_host_goes_per_message_in_its_place(
    make_store: MakeStore, tmp_path: Path
) -> None:
    merged, separate = make_store(tmp_path / "merged"), make_store(tmp_path / "separate")
    kinds = watch_appends(merged)
    batches: list[tuple[RecordBatch, Born]] = [
        (batch(record(b"v4", born_timestamp_ms=1)), V4),
        (batch(record(b"v6", born_timestamp_ms=2)), ("::1", 5)),
        (batch(record(b"again", born_timestamp_ms=3)), V4),
        (batch(record(b"bad host", born_timestamp_ms=4)), ("not-an-ip", 1)),
    ]
    got = together(merged, batches)
    expected = one_by_one(separate, batches)
    assert [[outcome(r) for r in rs] for rs in got] == [[outcome(r) for r in rs] for rs in expected]
    assert [r.queue_offset for rs in got[:3] for r in rs] == [0, 1, 2]
    assert got[3][0].status is PutStatus.MESSAGE_ILLEGAL
    assert len(kinds) == 3  # the v4 before, the v6 on its own, the v4 after
    assert_same_store(merged, separate)
    view = merged.look_message(got[1][0].commitlog_offset)
    assert view is not None and view.born_host == "[::1]:5"


def test_a_store_that_refuses_writes_refuses_every_batch_alike(make_store: MakeStore) -> None:
    # The cleaner's own probes agree (10 % used, above 5 %): none reopens writes mid-test.
    store = make_store(disk_space_warning_level_ratio=5)
    store.cleaner.disk_full = True
    batches = mixed_batches()[:3]
    got = together(store, batches)
    expected = one_by_one(store, batches)
    assert [[outcome(r) for r in rs] for rs in got] == [[outcome(r) for r in rs] for rs in expected]
    assert {r.status for rs in got for r in rs} == {PutStatus.SERVICE_NOT_AVAILABLE}
    assert store.commitlog.max_offset == 0


def test_schedule_topic_records_get_their_delivery_time_as_tag_code(
    make_store: MakeStore,
) -> None:
    store = make_store()
    delayed = record(b"later", topic=SCHEDULE_TOPIC, properties={PROPERTY_DELAY_MS: "5000"})
    results = together(
        store,
        [(batch(record(b"now")), V4), (batch(delayed, topic=SCHEDULE_TOPIC, queue_id=0), V4)],
    )
    stored = results[1][0]
    assert stored.status is PutStatus.PUT_OK
    assert store.wait_dispatched()
    cq = store.queues.get(SCHEDULE_TOPIC, 0)
    assert cq is not None
    assert cq.entry(0) == (
        stored.commitlog_offset,
        stored.wrote_bytes,
        stored.store_timestamp + 5000,
    )


def test_a_sync_flush_store_appends_each_batch_on_its_own(make_store: MakeStore) -> None:
    store = make_store(flush_disk_type="SYNC_FLUSH")
    kinds = watch_appends(store)
    got = together(store, mixed_batches()[:2])
    assert [r.status for rs in got for r in rs] == [PutStatus.PUT_OK] * 4
    assert kinds == [list, list]


BATCH_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "Orders"]),
        st.integers(0, 2),
        st.lists(st.tuples(st.integers(1, 4000), st.booleans()), min_size=1, max_size=24),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25, deadline=None)
@given(BATCH_SPECS)
def test_random_batch_lists_store_alike_together_and_one_by_one(specs: list) -> None:
    bad, _, _ = bad_records()["bad crc"]
    batches: list[tuple[RecordBatch, Born]] = []
    for n, (topic, queue_id, shapes) in enumerate(specs):
        raws = [
            record(bytes([n % 256]) * size, topic=topic, born_timestamp_ms=size) if good else bad
            for size, good in shapes
        ]
        batches.append((RecordBatch(b"".join(raws), len(raws), topic, queue_id), V4))
    with tempfile.TemporaryDirectory() as root:
        stores = [
            MessageStore(small_config(Path(root) / name), disk_usage=quiet_disk)
            for name in ("merged", "separate")
        ]
        for store in stores:
            store.start()
        try:
            got = together(stores[0], batches)
            expected = one_by_one(stores[1], batches)
            assert [[outcome(r) for r in rs] for rs in got] == [
                [outcome(r) for r in rs] for rs in expected
            ]
            assert_same_store(*stores)
        finally:
            for store in stores:
                store.shutdown()


def test_one_hand_off_dispatches_runs_and_record_lists_alike(make_store: MakeStore) -> None:
    store = make_store()
    kinds: list[list[type]] = []
    forward = store.commitlog.on_append
    assert forward is not None

    def seen(appended) -> None:  # type: ignore[no-untyped-def]
        kinds.append([type(part) for part in appended.requests.parts])
        forward(appended)

    store.commitlog.on_append = seen
    together(store, [(batch(*varied(CHECK_COLUMNS_MIN)), V4), (batch(record(b"one")), V4)])
    assert kinds == [[DispatchRun, list]]
    assert [e[0] for e in queue_entries(store)[("Orders", 1)]] == [
        r.commitlog_offset for r in store.get_messages("Orders", 1, 0, 100).messages
    ]


def one_record_sections(count: int) -> list[tuple[RecordBatch, Born]]:
    """A send of one message to each of ``count`` topics: a batch of one record each."""
    return [
        (batch(record(bytes([n]) * 100, topic=f"T{n}", born_timestamp_ms=n + 1), topic=f"T{n}"), V4)
        for n in range(count)
    ]


def test_one_record_batches_of_one_call_hand_dispatch_one_list(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """A request of many topics' one-record sections: its records' dispatch requests go
    over as one list, in CommitLog order, and dispatch as they do one call a batch."""
    merged, separate = make_store(tmp_path / "merged"), make_store(tmp_path / "separate")
    kinds = watch_appends(merged)
    batches = one_record_sections(6)
    got = together(merged, batches)
    one_by_one(separate, batches)
    assert kinds == [list]
    assert queue_entries(merged) == queue_entries(separate)
    assert [r.queue_offset for rs in got for r in rs] == [0] * 6
    assert_same_store(merged, separate)


def test_the_records_of_one_call_are_written_at_once_a_segment(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """The one-record batches of a call go to the segment in one write, published after
    it: no reader or dispatch round sees part of the call."""
    merged, separate = make_store(tmp_path / "merged"), make_store(tmp_path / "separate")
    writes: list[tuple[int, int]] = []
    published: list[int] = []
    segment = merged.commitlog.files.last_file_or_create(0)
    write_at = segment.write_at

    def counted(position: int, data: bytes | bytearray | memoryview) -> None:
        writes.append((position, len(data)))
        published.append(segment.wrote_position)
        write_at(position, data)

    segment.write_at = counted  # type: ignore[method-assign]
    batches = one_record_sections(8)
    got = together(merged, batches)
    expected = one_by_one(separate, batches)

    assert writes == [(0, merged.commitlog.max_offset)]
    assert published == [0]  # nothing of the call was visible before its write
    assert [[outcome(r) for r in rs] for rs in got] == [[outcome(r) for r in rs] for rs in expected]
    assert_same_store(merged, separate)


def test_a_segment_that_cannot_be_created_fails_the_rest_of_the_call_alike(
    make_store: MakeStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full at a segment's end: what the call put before it is written and stored,
    the records after it fail with CREATE_MAPPED_FILE_FAILED, as one by one."""
    stores = make_store(tmp_path / "merged"), make_store(tmp_path / "separate")
    filler = [record(b"f" * 3000 + bytes([i]), born_timestamp_ms=1) for i in range(25)]
    batches = [
        *one_record_sections(3),
        (batch(*filler, queue_id=0), V4),  # reaches the first segment's end
        *one_record_sections(2),
    ]

    def no_space(start_offset: int) -> None:
        raise OSError(28, "No space left on device")

    for store in stores:  # the first segment exists; no other can be created
        store.commitlog.files.last_file_or_create(0)
        monkeypatch.setattr(store.commitlog.files, "create_file", no_space)
    got = together(stores[0], batches)
    expected = one_by_one(stores[1], batches)

    assert [[outcome(r) for r in rs] for rs in got] == [[outcome(r) for r in rs] for rs in expected]
    statuses = [r.status for rs in got for r in rs]
    assert statuses[:3] == [PutStatus.PUT_OK] * 3
    assert statuses[3] is PutStatus.PUT_OK  # the batch's records before the end are stored
    assert statuses[27] is PutStatus.CREATE_MAPPED_FILE_FAILED  # and those past it fail
    assert statuses[28:] == [PutStatus.CREATE_MAPPED_FILE_FAILED] * 2
    assert "No space left" in got[-1][0].error
    assert_same_store(*stores)
