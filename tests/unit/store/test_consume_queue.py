"""ConsumeQueue (docs/store-format.md) and the reads built on it: entries, offsets by time, tags.

Store times are controlled by appending through ``CommitLog.encode/append``
with an explicit ``now_ms`` on a started store: the store's own dispatcher
turns those records into consume-queue entries, exactly as for
``put_message``. The times are close to the real clock so the store's cleaner
never sees an expired segment.
"""

from __future__ import annotations

import bisect
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import java_string_hash
from services.store import GetStatus, MessageStore, PutResult, PutStatus, StoreMessage
from services.store.consume_queue import ENTRY_SIZE, ConsumeQueue
from services.store.mapped_file import file_name
from tests.conftest import small_config

ENTRY = struct.Struct(">qiq")  # docs/store-format.md: commitlog_offset, size, tags_code
ENTRIES_PER_SMALL_FILE = 5
INT32_MIN = -(2**31)


# --------------------------------------------------------------------------- helpers


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def put_at(store: MessageStore, msg: StoreMessage, store_ts: int) -> PutResult:
    """Append ``msg`` with the store time ``store_ts`` (dispatched by the store itself)."""
    commitlog = store.commitlog
    results, _ = commitlog.append([commitlog.encode(msg, store_ts)], store_ts)
    assert results[0].status == PutStatus.PUT_OK
    assert store.wait_dispatched()
    return results[0]


def put(store: MessageStore, msg: StoreMessage) -> PutResult:
    result = store.put_message(msg)
    assert result.status == PutStatus.PUT_OK, result
    return result


def queue_dir(store: MessageStore, topic: str, queue_id: int) -> Path:
    return store.root / "consumequeue" / topic / str(queue_id)


def raw_entries(path: Path) -> list[tuple[int, int, int]]:
    data = path.read_bytes()
    return list(ENTRY.iter_unpack(data))


def served(
    store: MessageStore, topic: str, queue_id: int, offset: int = 0, subscription: str | None = None
) -> list[int]:
    """Queue offsets of every message served from ``offset`` on, in order."""
    out = []
    while True:
        got = store.get_messages(topic, queue_id, offset, 32, subscription)
        out.extend(m.queue_offset for m in got.messages)
        if got.next_begin_offset == offset or got.status not in (
            GetStatus.FOUND,
            GetStatus.NO_MATCHED_MESSAGE,
        ):
            return out
        offset = got.next_begin_offset


def fresh_queue(root: Path, entries_per_file: int = ENTRIES_PER_SMALL_FILE) -> ConsumeQueue:
    return ConsumeQueue(root, "T", 0, entries_per_file * ENTRY_SIZE)


def fill(cq: ConsumeQueue, count: int, record_bytes: int = 100) -> None:
    """Entries ``k`` -> commitlog offset ``k * record_bytes``, tags code ``k``."""
    for k in range(count):
        cq.put(k, k * record_bytes, record_bytes, k, 0)


# --------------------------------------------------------------------------- format


def test_entries_are_20_bytes_at_k_times_20(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    tags = ["TagA", None, "polygenelubricants", "标签"]  # the third hashes to Integer.MIN_VALUE
    results = [
        put(store, StoreMessage(topic="Fmt", body=b"x" * (10 + i), tags=t))
        for i, t in enumerate(tags)
    ]
    put(store, StoreMessage(topic="Other", body=b"y"))
    store.wait_dispatched()

    path = queue_dir(store, "Fmt", 0) / file_name(0)
    data = path.read_bytes()
    assert len(data) == 1000 * ENTRY_SIZE  # small_config: 1000 entries per file
    for k, (result, tag) in enumerate(zip(results, tags, strict=True)):
        expected_code = java_string_hash(tag) if tag else 0
        assert data[k * 20 : (k + 1) * 20] == struct.pack(
            ">qiq", result.commitlog_offset, result.wrote_bytes, expected_code
        )
    # The int32 hash is widened to int64 (sign-extended), as Java's long would be.
    assert data[2 * 20 + 12 : 3 * 20] == bytes.fromhex("FFFFFFFF80000000")
    assert java_string_hash("polygenelubricants") == INT32_MIN
    assert data[len(tags) * 20 :] == bytes(len(data) - len(tags) * 20)  # nothing else written


@pytest.mark.parametrize(
    ("configured", "rounded"), [(20, 20), (21, 40), (39, 40), (1000, 1000), (1001, 1020)]
)
def test_file_size_rounds_up_to_whole_entries(
    make_store: Callable[..., MessageStore], tmp_path: Path, configured: int, rounded: int
) -> None:
    assert (
        small_config(tmp_path, mapped_file_size_consume_queue=configured).consume_queue_file_size
        == rounded
    )
    store = make_store(mapped_file_size_consume_queue=configured)
    per_file = rounded // ENTRY_SIZE
    results = [put(store, StoreMessage(topic="R", body=b"m")) for _ in range(per_file + 1)]
    store.wait_dispatched()
    files = sorted(queue_dir(store, "R", 0).iterdir())
    assert [p.name for p in files] == [file_name(0), file_name(rounded)]
    assert [p.stat().st_size for p in files] == [rounded, rounded]
    # Entry ``per_file`` starts the second file at its byte 0.
    assert raw_entries(files[1])[0][:2] == (results[-1].commitlog_offset, results[-1].wrote_bytes)


# --------------------------------------------------------------------------- lookups


def test_lookup_by_queue_offset_across_several_files(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store(mapped_file_size_consume_queue=ENTRIES_PER_SMALL_FILE * ENTRY_SIZE)
    results: dict[int, list[PutResult]] = {0: [], 1: []}
    for i in range(23):
        for queue_id in (0, 1):
            results[queue_id].append(
                put(
                    store,
                    StoreMessage(
                        topic="L",
                        body=f"{queue_id}-{i}".encode(),
                        queue_id=queue_id,
                        tags=f"t{i % 3}",
                    ),
                )
            )
    store.wait_dispatched()
    assert len(list(queue_dir(store, "L", 0).iterdir())) == 5  # ceil(23 / 5)

    def check(s: MessageStore) -> None:
        for queue_id in (0, 1):
            cq = s.queues.get("L", queue_id)
            assert cq is not None
            for k, result in enumerate(results[queue_id]):
                assert cq.entry(k) == (
                    result.commitlog_offset,
                    result.wrote_bytes,
                    java_string_hash(f"t{k % 3}"),
                )
                got = s.get_messages("L", queue_id, k, 1)
                assert got.status == GetStatus.FOUND
                assert got.messages[0].body_bytes() == f"{queue_id}-{k}".encode()
                assert got.next_begin_offset == k + 1
            assert cq.entry(23) is None and cq.entry(-1) is None
        # One get crosses two file boundaries (entries 3..12 live in files 0, 1 and 2).
        got = s.get_messages("L", 0, 3, 10)
        assert [m.queue_offset for m in got.messages] == list(range(3, 13))
        assert got.next_begin_offset == 13
        assert served(s, "L", 1) == list(range(23))

    check(store)
    store.shutdown()
    check(make_store(mapped_file_size_consume_queue=ENTRIES_PER_SMALL_FILE * ENTRY_SIZE))


def test_consume_queue_on_its_own_files(tmp_path: Path) -> None:
    cq = fresh_queue(tmp_path)
    assert (cq.min_offset(), cq.max_offset(), cq.entry(0)) == (0, 0, None)
    fill(cq, 12)
    assert (cq.min_offset(), cq.max_offset()) == (0, 12)
    assert [cq.entry(k) for k in (0, 4, 5, 11)] == [
        (0, 100, 0),
        (400, 100, 4),
        (500, 100, 5),
        (1100, 100, 11),
    ]
    assert list(cq.entries(3, 100)) == [(k * 100, 100, k) for k in range(3, 12)]
    assert list(cq.entries(4, 2)) == [(400, 100, 4), (500, 100, 5)]
    assert cq.max_physical_offset == 1200
    cq.close()

    reopened = fresh_queue(tmp_path)
    reopened.load()
    reopened.recover()
    assert (reopened.min_offset(), reopened.max_offset()) == (0, 12)
    assert reopened.entry(11) == (1100, 100, 11) and reopened.entry(12) is None
    assert reopened.max_physical_offset == 1200
    reopened.close()


# --------------------------------------------------------------------------- offset by time


def test_offset_by_time_ties_before_first_and_after_last(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    base = now_ms()
    for delta in (0, 1000, 1000, 1000, 2000):
        put_at(store, StoreMessage(topic="Tm", body=b"x"), base + delta)
    expected = {
        base - 60_000: 0,  # before the first: the min offset
        base: 0,
        base + 1: 1,
        base + 999: 1,
        base + 1000: 1,  # a tie: the first of the equal times
        base + 1001: 4,
        base + 2000: 4,
        base + 2001: 5,  # after the last: the max offset
        base + 3_600_000: 5,
    }
    assert {ts: store.offset_by_time("Tm", 0, ts) for ts in expected} == expected
    assert store.offset_by_time("Tm", 1, base) == 0  # no such queue
    assert store.offset_by_time("Nope", 0, base) == 0


def test_offset_by_time_across_files(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(mapped_file_size_consume_queue=ENTRIES_PER_SMALL_FILE * ENTRY_SIZE)
    base = now_ms()
    times = [base + 10 * k for k in range(23)]
    for ts in times:
        put_at(store, StoreMessage(topic="Tf", body=b"x"), ts)
    for k, ts in enumerate(times):
        assert store.offset_by_time("Tf", 0, ts) == k
        assert store.offset_by_time("Tf", 0, ts - 5) == k
        assert store.offset_by_time("Tf", 0, ts + 5) == k + 1


def test_offset_by_time_with_skewed_store_times(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    base = now_ms()
    # The clock stepped back between the second and third message.
    deltas = [0, 3000, 1000, 2000, 4000]
    for delta in deltas:
        put_at(store, StoreMessage(topic="Sk", body=b"x"), base + delta)
    for target in (-1, 0, 500, 1000, 1500, 2500, 3000, 3500, 4000, 4001):
        found = store.offset_by_time("Sk", 0, base + target)
        assert 0 <= found <= len(deltas)
        # Whatever the skew, the answer is a boundary: stored at/after the target,
        # and the entry before it stored before the target.
        if found < len(deltas):
            assert deltas[found] >= target, (target, found)
        if found > 0:
            assert deltas[found - 1] < target, (target, found)
    assert store.offset_by_time("Sk", 0, base + 4001) == len(deltas)
    assert store.offset_by_time("Sk", 0, base) == 0


def test_offset_by_time_of_an_empty_queue(tmp_path: Path) -> None:
    cq = fresh_queue(tmp_path)
    calls: list[int] = []
    assert cq.offset_by_time(123, lambda offset, size: calls.append(offset) or 0) == 0
    assert calls == []
    cq.close()


def test_offset_by_time_skips_entries_whose_records_are_gone(tmp_path: Path) -> None:
    cq = fresh_queue(tmp_path)
    fill(cq, 12)
    times = {k * 100: 5000 + k for k in range(3, 12)}  # records 0..2 were cleaned away

    def store_time_of(offset: int, size: int) -> int | None:
        assert size == 100
        return times.get(offset)

    assert cq.offset_by_time(0, store_time_of) == 3
    assert cq.offset_by_time(5007, store_time_of) == 7
    assert cq.offset_by_time(9999, store_time_of) == 12
    assert cq.offset_by_time(0, lambda offset, size: None) == 12  # every record gone
    cq.close()


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.integers(0, 50), max_size=17),
    target=st.integers(-1, 51),
    monotonic=st.booleans(),
)
def test_offset_by_time_is_always_a_boundary(
    times: list[int], target: int, monotonic: bool
) -> None:
    if monotonic:
        times = sorted(times)
    with tempfile.TemporaryDirectory() as tmp:
        cq = fresh_queue(Path(tmp))
        fill(cq, len(times))
        by_offset = {k * 100: ts for k, ts in enumerate(times)}
        try:
            found = cq.offset_by_time(target, lambda offset, size: by_offset[offset])
        finally:
            cq.close()
    assert 0 <= found <= len(times)
    if found < len(times):
        assert times[found] >= target
    if found > 0:
        assert times[found - 1] < target
    if monotonic:
        assert found == bisect.bisect_left(times, target)


# --------------------------------------------------------------------------- tags


def test_tag_filtering(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    tags = ["A", "B", "C", None, "A", "Aa", "BB", "B", "AB"]
    assert java_string_hash("Aa") == java_string_hash("BB")  # same tags_code in the queue
    for i, tag in enumerate(tags):
        put(store, StoreMessage(topic="Tg", body=str(i).encode(), tags=tag))
    store.wait_dispatched()
    cq = store.queues.get("Tg", 0)
    assert cq is not None and cq.entry(5)[2] == cq.entry(6)[2] == 2112  # type: ignore[index]
    assert cq.entry(3)[2] == 0  # type: ignore[index]

    def offsets(subscription: str | None) -> list[int]:
        got = store.get_messages("Tg", 0, 0, 32, subscription)
        assert got.next_begin_offset == len(tags)  # the whole queue was scanned
        return [m.queue_offset for m in got.messages]

    everything = list(range(len(tags)))
    assert offsets("*") == offsets(None) == offsets("") == everything
    assert offsets("A || B") == [0, 1, 4, 7]
    assert offsets("B||A") == [0, 1, 4, 7]
    assert offsets("Aa") == [5]  # the colliding "BB" is dropped by its real tag
    assert offsets("BB || C") == [2, 6]
    assert offsets("A || *") == everything
    nothing = store.get_messages("Tg", 0, 0, 32, "Z")
    assert nothing.status == GetStatus.NO_MATCHED_MESSAGE and nothing.messages == []
    assert nothing.next_begin_offset == len(tags)


def test_filtered_get_pages_through_the_queue(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(
        mapped_file_size_consume_queue=ENTRIES_PER_SMALL_FILE * ENTRY_SIZE, max_get_scan_entries=4
    )
    tags = ["X", "Y", "Y", "Y", "Y", "Y", "X", "Y", "X", "X", "Y", "Y"]
    for tag in tags:
        put(store, StoreMessage(topic="Pg", body=b"x", tags=tag))
    store.wait_dispatched()

    first = store.get_messages("Pg", 0, 0, 2, "X")
    assert [m.queue_offset for m in first.messages] == [0]  # the scan limit (4) ended the get
    assert first.status == GetStatus.FOUND and first.next_begin_offset == 4
    second = store.get_messages("Pg", 0, 1, 2, "X")
    assert second.status == GetStatus.NO_MATCHED_MESSAGE and second.next_begin_offset == 5
    third = store.get_messages("Pg", 0, 5, 2, "X")
    assert [m.queue_offset for m in third.messages] == [6, 8]
    assert third.next_begin_offset == 9  # just past the second match
    assert served(store, "Pg", 0, 0, "X") == [0, 6, 8, 9]


def test_invalid_subscription_reads_nothing(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    put(store, StoreMessage(topic="Iv", body=b"x", tags="A"))
    store.wait_dispatched()
    got = store.get_messages("Iv", 0, 0, 32, "A ||")
    assert got.status == GetStatus.NO_MATCHED_MESSAGE and got.messages == []
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (0, 0, 1)


# --------------------------------------------------------------------------- offsets and statuses


def test_min_and_max_offsets_per_queue(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    assert (store.min_offset("Mm", 0), store.max_offset("Mm", 0)) == (0, 0)
    for i in range(7):
        put(store, StoreMessage(topic="Mm", body=b"x", queue_id=i % 2))
    put(store, StoreMessage(topic="Other", body=b"x"))
    store.wait_dispatched()
    assert [(store.min_offset("Mm", q), store.max_offset("Mm", q)) for q in (0, 1, 2)] == [
        (0, 4),
        (0, 3),
        (0, 0),
    ]
    got = store.get_messages("Mm", 0, 0)
    assert (got.min_offset, got.max_offset) == (0, 4)


def test_get_statuses_at_the_edges(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    for _ in range(3):
        put(store, StoreMessage(topic="St", body=b"x"))
    store.wait_dispatched()

    def status(topic: str, queue_id: int, offset: int) -> tuple[GetStatus, int]:
        got = store.get_messages(topic, queue_id, offset, 32)
        return got.status, got.next_begin_offset

    assert status("Nope", 0, 0) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    assert status("St", 1, 0) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    assert status("St", 0, 0) == (GetStatus.FOUND, 3)
    assert status("St", 0, 2) == (GetStatus.FOUND, 3)
    assert status("St", 0, 3) == (GetStatus.OFFSET_OVERFLOW_ONE, 3)
    assert status("St", 0, 4) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)  # min is 0: restart there
    assert status("St", 0, 10**12) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    assert status("St", 0, -1) == (GetStatus.OFFSET_TOO_SMALL, 0)
    got = store.get_messages("St", 0, 3, 32)
    assert (got.min_offset, got.max_offset, got.messages) == (0, 3, [])


def test_an_existing_queue_without_entries(
    tmp_path: Path, make_store: Callable[..., MessageStore]
) -> None:
    # A queue file created just before a crash: all zeros, no entry written.
    root = tmp_path / "store"
    empty = root / "consumequeue" / "Em" / "0"
    empty.mkdir(parents=True)
    (empty / file_name(0)).write_bytes(bytes(small_config(root).consume_queue_file_size))
    store = make_store(root)
    got = store.get_messages("Em", 0, 0, 32)
    assert (got.status, got.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    assert (store.min_offset("Em", 0), store.max_offset("Em", 0)) == (0, 0)
    assert store.get_messages("Em", 0, 5, 32).status == GetStatus.NO_MESSAGE_IN_QUEUE


def test_statuses_after_old_files_are_cleaned(tmp_path: Path) -> None:
    usage = [50.0]
    config = small_config(
        tmp_path / "store",
        mapped_file_size_consume_queue=10 * ENTRY_SIZE,
        delete_commitlog_files_interval_ms=0,
        disk_space_clean_forcibly_ratio=85,  # the watermark this test crosses with its probe
    )
    store = MessageStore(config, disk_usage=lambda path: usage[0])
    store.start()
    try:
        results = [
            put(store, StoreMessage(topic="Cl", body=bytes(8 * 1024), tags="t")) for _ in range(40)
        ]
        store.wait_dispatched()
        assert len(store.commitlog.files.files) >= 5
        usage[0] = 87.0  # above 85 %: segments go regardless of age, never the last one
        store.cleaner.run_once()
        usage[0] = 50.0
        commitlog_min = store.commitlog.min_offset
        assert commitlog_min > 0 and len(store.commitlog.files.files) == 1
        expected_min = next(k for k, r in enumerate(results) if r.commitlog_offset >= commitlog_min)
        assert store.min_offset("Cl", 0) == expected_min > 0
        assert store.max_offset("Cl", 0) == 40
        assert not (queue_dir(store, "Cl", 0) / file_name(0)).exists()

        low = store.get_messages("Cl", 0, 0, 32)
        assert (low.status, low.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, expected_min)
        at_min = store.get_messages("Cl", 0, expected_min, 32)
        assert at_min.status == GetStatus.FOUND
        assert [m.queue_offset for m in at_min.messages] == list(range(expected_min, 40))
        high = store.get_messages("Cl", 0, 41, 32)
        assert (high.status, high.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 40)
        assert store.offset_by_time("Cl", 0, 0) == expected_min
    finally:
        store.shutdown()
