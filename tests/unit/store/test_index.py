"""The hash index: IndexFile and IndexService on real files, and query_messages.

The format is in docs/store-format.md (IndexFile).

Direct tests build an :class:`IndexService` in ``tmp_path`` and feed it
``build_index`` calls with chosen CommitLog offsets and store times; store
tests go through ``put_message`` (or ``CommitLog.encode/append`` with an
explicit store time, dispatched by the store) and ``query_messages``.
Expected query answers come from a plain-list oracle of what was indexed.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from boltmq.wire.record import java_string_hash
from services.store import MessageStore, PutResult, PutStatus, StoreMessage
from services.store.index_file import IndexFile, index_file_name, index_file_size, key_hash
from services.store.index_service import IndexService
from services.store.index_spare import SPARE_NAME

HEADER = struct.Struct(">qqqqii")  # docs/store-format.md: 40-byte header
ENTRY = struct.Struct(">iqii")  # key_hash, phy_offset, time_diff_s, prev_index
HEADER_BYTES = 40
SLOT_BYTES = 4
ENTRY_BYTES = 20
FAR_FUTURE_MS = 1 << 62
TOPIC = "T"


# --------------------------------------------------------------------------- helpers


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Indexed:
    """One ``build_index`` call: what the oracle knows."""

    offset: int
    keys: tuple[str, ...]
    store_ts: int


class Rig:
    """An IndexService in a directory plus the oracle of everything indexed."""

    def __init__(self, index_dir: Path, slots: int, max_index_num: int) -> None:
        self.index_dir = index_dir
        self.slots = slots
        self.max_index_num = max_index_num
        self.service = IndexService(index_dir, slots, max_index_num)
        self.indexed: list[Indexed] = []

    def add(self, offset: int, keys: Sequence[str], store_ts: int) -> None:
        self.service.build_index(TOPIC, keys, offset, store_ts)
        self.indexed.append(Indexed(offset, tuple(keys), store_ts))

    def reopen(
        self, last_exit_ok: bool = True, checkpoint_ts: int = 0, repair: bool = True
    ) -> list[str]:
        self.service.close()
        self.service = IndexService(self.index_dir, self.slots, self.max_index_num)
        return self.service.load(last_exit_ok, checkpoint_ts, repair=repair)

    def query(self, key: str, begin_ms: int = 0, end_ms: int = FAR_FUTURE_MS) -> list[int]:
        return self.service.query(TOPIC, key, 1000, begin_ms, end_ms)

    def expected(self, key: str, keep: Callable[[Indexed], bool] = lambda i: True) -> list[int]:
        """Offsets indexed under ``key`` that ``keep`` accepts, newest first."""
        return sorted((i.offset for i in self.indexed if key in i.keys and keep(i)), reverse=True)

    def keys(self) -> set[str]:
        return {k for i in self.indexed for k in i.keys}

    def file_names(self) -> list[str]:
        return sorted(p.name for p in self.index_dir.iterdir())


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def make(slots: int = 8, max_index_num: int = 5) -> Rig:
        rig = Rig(tmp_path / f"index{len(rigs)}", slots, max_index_num)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.service.close()


def fill(rig: Rig, count: int, base_ts: int, step_ms: int = 1000) -> None:
    """Record ``n`` at offset ``100 n``: key ``k<n>``, plus ``even`` on even records."""
    for n in range(count):
        keys = [f"k{n}", "even"] if n % 2 == 0 else [f"k{n}"]
        rig.add(100 * n, keys, base_ts + step_ms * n)


def header_of(path: Path) -> tuple[int, int, int, int, int, int]:
    return HEADER.unpack(path.read_bytes()[:HEADER_BYTES])


def patch(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def file_problems(rig: Rig) -> list[str]:
    """Structural problems inside each file (the per-file half of verify_entries)."""
    return [problem for f in rig.service.files for problem in f.check()]


def colliding_keys(slots: int, count: int = 2) -> list[str]:
    """``count`` keys whose hashes differ but land in the same slot."""
    by_slot: dict[int, list[str]] = {}
    for n in itertools.count():
        key = f"key-{n}"
        bucket = by_slot.setdefault(key_hash(TOPIC, key) % slots, [])
        if all(key_hash(TOPIC, other) != key_hash(TOPIC, key) for other in bucket):
            bucket.append(key)
        if len(bucket) == count:
            return bucket
    raise AssertionError("unreachable")


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


# --------------------------------------------------------------------------- layout


def test_header_slot_and_entry_layout(tmp_path: Path) -> None:
    slots, capacity = 8, 6
    base = 1_700_000_000_250
    path = tmp_path / index_file_name(base)
    f = IndexFile(path, slots, capacity, create=True)
    assert path.stat().st_size == index_file_size(slots, capacity) == 40 + 8 * 4 + 6 * 20
    assert header_of(path) == (0, 0, 0, 0, 0, 1)  # index_count starts at 1: entry 0 unused

    a, b = colliding_keys(slots)
    c = next(
        f"other-{n}"
        for n in itertools.count()
        if key_hash(TOPIC, f"other-{n}") % slots != key_hash(TOPIC, a) % slots
    )
    ha, hb, hc = (key_hash(TOPIC, k) for k in (a, b, c))
    assert f.put(ha, 1000, base)
    assert f.put(hc, 1100, base + 1500)
    assert f.put(hb, 1200, base + 3200)

    data = path.read_bytes()
    begin_ts, end_ts, begin_phy, end_phy, hash_slot_count, index_count = HEADER.unpack_from(data)
    assert (begin_ts, end_ts, begin_phy, end_phy) == (base, base + 3200, 1000, 1200)
    assert struct.unpack_from(">q", data, 0)[0] == base  # begin_timestamp @0
    assert struct.unpack_from(">q", data, 8)[0] == base + 3200  # end_timestamp @8
    assert struct.unpack_from(">q", data, 16)[0] == 1000  # begin_phy_offset @16
    assert struct.unpack_from(">q", data, 24)[0] == 1200  # end_phy_offset @24
    assert hash_slot_count == 3  # documented: entries in use
    assert index_count == struct.unpack_from(">i", data, 36)[0] == 4

    slot_table = [
        struct.unpack_from(">i", data, HEADER_BYTES + s * SLOT_BYTES)[0] for s in range(slots)
    ]
    expected_slots = [0] * slots
    expected_slots[hc % slots] = 2
    expected_slots[ha % slots] = 3  # the newest entry of the shared slot
    assert slot_table == expected_slots
    entries_at = HEADER_BYTES + slots * SLOT_BYTES
    entries = [ENTRY.unpack_from(data, entries_at + n * ENTRY_BYTES) for n in range(capacity)]
    assert entries[0] == (0, 0, 0, 0)
    assert entries[1] == (ha, 1000, 0, 0)
    assert entries[2] == (hc, 1100, 1, 0)  # 1.5 s after begin: whole seconds
    assert entries[3] == (hb, 1200, 3, 1)  # chained to entry 1 of the same slot
    assert entries[4:] == [(0, 0, 0, 0)] * 2

    # Entry 0 is unused, so a file of 6 entries takes 5.
    assert f.put(hc, 1300, base + 4000) and f.put(hc, 1400, base + 4000)
    assert f.is_full() and not f.put(hc, 1500, base + 5000)
    assert f.entry_count == 5 and header_of(path)[5] == 6
    f.close()


def test_store_index_header_describes_its_entries(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    results = [
        put(store, StoreMessage(topic=TOPIC, body=b"x", keys=[f"a{i}", f"b{i}"])) for i in range(3)
    ]
    store.wait_dispatched()
    (path,) = sorted((store.root / "index").iterdir())
    assert len(path.name) == 17 and path.name.isdigit()
    begin_ts, end_ts, begin_phy, end_phy, count, index_count = header_of(path)
    assert (begin_ts, end_ts) == (results[0].store_timestamp, results[-1].store_timestamp)
    assert (begin_phy, end_phy) == (results[0].commitlog_offset, results[-1].commitlog_offset)
    assert (count, index_count) == (6, 7)
    assert path.stat().st_size == index_file_size(1000, 4000)  # small_config's geometry


def test_key_hash_is_abs_of_the_java_hash_of_topic_hash_key() -> None:
    assert key_hash("T", "hello") == abs(java_string_hash("T#hello"))
    assert key_hash("Aa", "x") == key_hash("BB", "x")  # same length, same hash
    negative = next(f"n{n}" for n in itertools.count() if java_string_hash(f"T#n{n}") < 0)
    assert key_hash("T", negative) == -java_string_hash(f"T#{negative}") > 0


# --------------------------------------------------------------------------- several files


def test_keys_across_several_index_files(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(max_index_num=5, max_hash_slot_num=8)  # 4 entries per file
    results = []
    for i in range(10):
        keys = [f"k{i}", "shared"] if i % 3 == 0 else [f"k{i}"]
        results.append(put(store, StoreMessage(topic=TOPIC, body=str(i).encode(), keys=keys)))
    put(store, StoreMessage(topic="Other", body=b"o", keys=["k1", "shared"]))
    uniq = put(store, StoreMessage(topic=TOPIC, body=b"u", properties={"UNIQ_KEY": "U-1"}))
    store.wait_dispatched()
    # 10 + 4 "shared" + 2 of Other + 1 UNIQ_KEY = 17 entries, 4 per file (the next
    # file, made ahead once the newest is half full, is no index file yet).
    files = sorted(p for p in (store.root / "index").iterdir() if p.name != SPARE_NAME)
    assert len(files) == 5
    assert [header_of(p)[5] for p in files] == [5, 5, 5, 5, 2]

    def check(s: MessageStore) -> None:
        for i, result in enumerate(results):
            assert [m.msg_id for m in s.query_messages(TOPIC, f"k{i}")] == [result.msg_id]
        shared = [results[i].commitlog_offset for i in (9, 6, 3, 0)]
        assert [m.commitlog_offset for m in s.query_messages(TOPIC, "shared")] == shared
        assert [m.commitlog_offset for m in s.query_messages(TOPIC, "shared", 2)] == shared[:2]
        assert [m.msg_id for m in s.query_messages(TOPIC, "U-1")] == [uniq.msg_id]
        assert [m.topic for m in s.query_messages("Other", "shared")] == ["Other"]
        assert s.query_messages(TOPIC, "missing") == []

    check(store)
    assert store.verify() == []
    store.shutdown()
    check(make_store(max_index_num=5, max_hash_slot_num=8))


def test_service_rolls_files_and_finds_every_key(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    fill(rig, 11, now_ms())
    # 11 + 6 "even" entries = 17: four full files of 4 and one of 1.
    assert len(rig.service.files) == 5
    assert [f.entry_count for f in rig.service.files] == [4, 4, 4, 4, 1]
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key), key
    assert file_problems(rig) == []
    rig.reopen()
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key), key


def test_keys_of_one_record_may_straddle_two_files(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(max_index_num=5, max_hash_slot_num=8)  # 4 entries per file
    results = [
        put(store, StoreMessage(topic=TOPIC, body=b"x", keys=[f"a{i}", f"b{i}", f"c{i}"]))
        for i in range(3)
    ]
    store.wait_dispatched()
    files = store.index.files
    assert len(files) == 3  # 9 entries; records 1 and 2 each have keys in two files
    assert files[1].begin_phy_offset == files[0].end_phy_offset == results[1].commitlog_offset
    for i, result in enumerate(results):
        for key in (f"a{i}", f"b{i}", f"c{i}"):
            assert [m.msg_id for m in store.query_messages(TOPIC, key)] == [result.msg_id]
    # A sound index: verify (and the store's verify built on it) finds nothing wrong.
    assert store.index.verify_entries() == []
    assert store.verify() == []


def test_query_messages_max_count_zero_returns_nothing(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    for _ in range(3):
        put(store, StoreMessage(topic=TOPIC, body=b"x", keys=["k"]))
    store.wait_dispatched()
    assert len(store.query_messages(TOPIC, "k", 2)) == 2
    assert store.query_messages(TOPIC, "k", 0) == []


# --------------------------------------------------------------------------- collisions


def test_slot_collisions_keep_keys_apart(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=3, max_index_num=50)
    a, b, c = colliding_keys(3, count=3)
    base = now_ms()
    for n, key in enumerate([a, b, c, a, b, a]):
        rig.add(100 * n, [key], base)
    assert rig.query(a) == [500, 300, 0]
    assert rig.query(b) == [400, 100]
    assert rig.query(c) == [200]


def test_query_messages_drops_keys_whose_hash_collides(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store(max_hash_slot_num=4)
    assert key_hash(TOPIC, "Aa") == key_hash(TOPIC, "BB")
    a, b = colliding_keys(4)
    aa = put(store, StoreMessage(topic=TOPIC, body=b"Aa", keys=["Aa"]))
    bb = put(store, StoreMessage(topic=TOPIC, body=b"BB", keys=["BB"]))
    ra = put(store, StoreMessage(topic=TOPIC, body=b"a", keys=[a]))
    rb = put(store, StoreMessage(topic=TOPIC, body=b"b", keys=[b]))
    store.wait_dispatched()
    # The index compares hashes only: both colliding records come back...
    assert store.index.query(TOPIC, "Aa", 10, 0, FAR_FUTURE_MS) == [
        bb.commitlog_offset,
        aa.commitlog_offset,
    ]
    # ...and query_messages keeps the one whose real key matches.
    assert [m.msg_id for m in store.query_messages(TOPIC, "Aa")] == [aa.msg_id]
    assert [m.msg_id for m in store.query_messages(TOPIC, "BB")] == [bb.msg_id]
    assert [m.msg_id for m in store.query_messages(TOPIC, a)] == [ra.msg_id]
    assert [m.msg_id for m in store.query_messages(TOPIC, b)] == [rb.msg_id]


# --------------------------------------------------------------------------- time ranges


def test_service_time_ranges_by_whole_seconds(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    base = 1_700_000_000_000
    for n in range(9):  # three files, records 10 s apart
        rig.add(100 * n, ["k"], base + 10_000 * n)

    def in_range(begin: int, end: int) -> list[int]:
        return rig.expected("k", lambda i: begin <= i.store_ts <= end)

    for begin, end in [
        (base + 5000, base + 15_000),
        (base + 10_000, base + 10_000),
        (base, base + 80_000),
        (base - 5000, base - 1000),
        (base + 81_000, base + 99_000),
        (base + 25_000, base + 55_000),
        (base + 40_000, base + 40_000),
        (base + 1000, base + 9000),
    ]:
        assert rig.query("k", begin, end) == in_range(begin, end), (begin, end)


def test_query_messages_time_range_includes_and_excludes(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    base = now_ms() - 60_000
    results = [
        put_at(
            store, StoreMessage(topic=TOPIC, body=str(i).encode(), keys=["k"]), base + 10_000 * i
        )
        for i in range(3)
    ]
    ids = [r.msg_id for r in results]

    def query(begin: int, end: int) -> list[str]:
        return [m.msg_id for m in store.query_messages(TOPIC, "k", 32, begin, end)]

    assert query(base, base + 20_000) == ids[::-1]
    assert query(base + 5000, base + 15_000) == [ids[1]]
    assert query(base + 10_000, base + 10_000) == [ids[1]]  # both ends inclusive
    assert query(base + 10_000, base + 20_000) == [ids[2], ids[1]]
    assert query(base - 30_000, base - 1) == []
    assert query(base + 21_000, base + 50_000) == []
    assert [m.msg_id for m in store.query_messages(TOPIC, "k")] == ids[::-1]  # default range


def test_query_messages_compares_exact_store_times(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    base = now_ms() - 60_000
    first = put_at(store, StoreMessage(topic=TOPIC, body=b"0", keys=["k"]), base)
    second = put_at(store, StoreMessage(topic=TOPIC, body=b"1", keys=["k"]), base + 10_500)

    def query(begin: int, end: int) -> list[str]:
        return [m.msg_id for m in store.query_messages(TOPIC, "k", 32, begin, end)]

    assert query(base, base + 10_500) == [second.msg_id, first.msg_id]
    # The index keeps whole seconds; the range is in milliseconds.
    assert query(base + 10_501, base + 20_000) == []  # stored 1 ms before the range
    assert query(base + 1, base + 10_499) == []  # stored 1 ms after the range
    assert query(base + 10_200, base + 10_400) == []


# --------------------------------------------------------------------------- truncation


def test_truncate_past_cuts_entries_at_and_after_the_commitlog_end(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    base = now_ms()
    fill(rig, 12, base)  # offsets 0..1100, 18 entries, five files
    names_before = rig.file_names()
    notes = rig.service.truncate_past(650)
    assert any("removed" in n for n in notes) and any("cut" in n for n in notes)
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key, lambda i: i.offset < 650), key
    assert rig.service.files[-1].end_phy_offset == 600
    assert len(rig.file_names()) < len(names_before)
    assert file_problems(rig) == []

    # Re-dispatch after recovery adds the cut records back, once each.
    for n in range(7, 12):
        keys = [f"k{n}", "even"] if n % 2 == 0 else [f"k{n}"]
        rig.service.build_index(TOPIC, keys, 100 * n, base + 1000 * n)
    rig.service.build_index(TOPIC, ["k5"], 500, base + 5000)  # already indexed: ignored
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key), key
    rig.reopen()
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key), key
    assert rig.service.truncate_past(10**9) == []  # nothing at or past the end


def test_load_after_a_crash_cuts_entries_newer_than_the_checkpoint(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    base = 1_700_000_000_000
    fill(rig, 12, base)  # record n stored at base + n s
    files_before = rig.file_names()
    checkpoint = base + 5000
    notes = rig.reopen(last_exit_ok=False, checkpoint_ts=checkpoint)
    assert any("begun after the checkpoint removed" in n for n in notes)
    # Entry times are whole seconds: an entry of the checkpoint's own second may
    # be newer than the checkpoint, so it is cut too (re-dispatch restores it).
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key, lambda i: i.store_ts + 999 <= checkpoint), key
    assert len(rig.file_names()) < len(files_before)
    assert file_problems(rig) == []
    assert max(f.end_timestamp for f in rig.service.files) <= checkpoint


def test_a_clean_load_cuts_nothing(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    base = 1_700_000_000_000
    fill(rig, 12, base)
    before = rig.file_names()
    assert rig.reopen(last_exit_ok=True, checkpoint_ts=base) == []
    assert rig.file_names() == before
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key), key


def test_crash_cut_drops_an_entry_stored_within_the_checkpoint_second(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(slots=8, max_index_num=50)
    base = 1_700_000_000_000
    for n in range(5):
        rig.add(100 * n, [f"k{n}"], base + 1000 * n)
    rig.add(500, ["late"], base + 4500)  # 300 ms after the index checkpoint below
    rig.reopen(last_exit_ok=False, checkpoint_ts=base + 4200)
    assert rig.query("late") == []  # stored after the checkpoint: possibly never flushed
    for n in range(4):  # earlier seconds survive whatever the rounding
        assert rig.query(f"k{n}") == [100 * n]


def test_load_without_repair_changes_no_file(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    base = 1_700_000_000_000
    fill(rig, 12, base)
    rig.service.close()
    (rig.index_dir / "20240101000000000.tmp").write_bytes(b"half")
    (rig.index_dir / "20240101000000001").write_bytes(b"short")
    before = snapshot(rig.index_dir)
    notes = rig.reopen(last_exit_ok=False, checkpoint_ts=base + 1000, repair=False)
    assert any("20240101000000001" in n and "unusable" in n for n in notes)
    assert not any("corrupt" in n or "removed" in n or "cut" in n for n in notes)
    for key in rig.keys():  # nothing was cut
        assert rig.query(key) == rig.expected(key), key
    rig.service.close()
    assert snapshot(rig.index_dir) == before


def test_load_without_repair_leaves_a_zeroed_header_alone(tmp_path: Path) -> None:
    # A file created just before a crash, before its header was written: all zeros.
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    path = index_dir / index_file_name(1_700_000_000_000)
    path.write_bytes(bytes(index_file_size(8, 5)))
    service = IndexService(index_dir, 8, 5)
    service.load(True, 0, repair=False)
    assert service.query(TOPIC, "k", 10, 0, FAR_FUTURE_MS) == []
    service.close()
    assert path.read_bytes() == bytes(index_file_size(8, 5))


# --------------------------------------------------------------------------- damaged files


@pytest.mark.parametrize(
    "content",
    [
        b"short",  # shorter than the header
        bytes(HEADER_BYTES + 3),  # fits no slot/entry geometry
        HEADER.pack(0, 0, 0, 0, 0, 10_000) + bytes(8 * 4 + 5 * 20),  # index_count past capacity
    ],
)
def test_a_damaged_index_file_is_set_aside(make_rig: Callable[..., Rig], content: bytes) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    base = now_ms()
    fill(rig, 3, base)
    rig.service.close()
    bad_name = "20000101000000000"
    (rig.index_dir / bad_name).write_bytes(content)
    (rig.index_dir / "README").write_bytes(b"not an index file")
    notes = rig.reopen()
    assert [n for n in notes if bad_name in n] == [
        n for n in notes if "unusable" in n and n.endswith("set aside as .corrupt")
    ]
    assert len([n for n in notes if bad_name in n]) == 1
    assert (rig.index_dir / f"{bad_name}.corrupt").read_bytes() == content
    assert not (rig.index_dir / bad_name).exists()
    assert (rig.index_dir / "README").exists()  # not an index name: left alone
    for key in rig.keys():
        assert rig.query(key) == rig.expected(key), key
    rig.add(1000, ["after"], base + 10_000)
    assert rig.query("after") == [1000]


def test_delete_files_below_never_deletes_the_newest(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=8, max_index_num=5)
    fill(rig, 12, now_ms())
    files = list(rig.service.files)
    assert len(files) == 5
    ends = [f.end_phy_offset for f in files]
    cut = ends[1] + 1  # the first two files lie wholly below
    assert rig.service.delete_files_below(cut, 0) == 2
    assert rig.service.files == files[2:]
    assert rig.file_names() == sorted(f.path.name for f in files[2:])
    assert rig.service.delete_files_below(10**12, 0) == 2
    assert rig.service.files == files[4:]
    assert rig.service.delete_files_below(10**12, 0) == 0
    assert rig.file_names() == [files[4].path.name]
    newest_keys = {k for i in rig.indexed if i.offset > ends[3] for k in i.keys}
    for key in newest_keys:
        assert rig.query(key) == rig.expected(key, lambda i: i.offset > ends[3]), key


def test_verify_entries_reports_a_garbled_slot_and_entry(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(slots=8, max_index_num=50)
    fill(rig, 6, now_ms())
    assert rig.service.verify_entries() == []
    (f,) = rig.service.files
    slot = key_hash(TOPIC, "k1") % 8
    patch(f.path, HEADER_BYTES + slot * SLOT_BYTES, struct.pack(">i", 999))
    problems = rig.service.verify_entries()
    assert problems == [f"index {f.path.name}: slot {slot} points at entry 999 of {f.entry_count}"]
    assert rig.query("k1") == []  # a slot past the entries is ignored, not followed

    entry_3_prev = HEADER_BYTES + 8 * SLOT_BYTES + 3 * ENTRY_BYTES + 16
    patch(f.path, entry_3_prev, struct.pack(">i", 3))  # points at itself
    problems = rig.service.verify_entries()
    assert len(problems) == 2 and "entry 3 is malformed" in problems[1]
    slot_of_3 = (
        ENTRY.unpack_from(f.path.read_bytes(), HEADER_BYTES + 8 * SLOT_BYTES + 3 * ENTRY_BYTES)[0]
        % 8
    )
    keys_in_slot = [k for k in rig.keys() if key_hash(TOPIC, k) % 8 == slot_of_3]
    for key in keys_in_slot:  # the chain walk stops at the loop instead of spinning
        assert set(rig.query(key)) <= set(rig.expected(key))
