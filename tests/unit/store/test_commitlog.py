"""CommitLog segments (docs/store-format.md): blank markers, file lookup, naming, oversize records.

Record sizes are exact: a message on topic ``T`` with no properties costs
``FIXED_OVERHEAD_IPV4 + 1`` bytes plus its body, so a test can put the end of
a record at any byte of a segment and watch what the next record does there.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from boltmq.wire.record import BLANK_MARKER_SIZE, FIXED_OVERHEAD_IPV4, MAGIC_BLANK
from services.store import MessageStore, PutResult, PutStatus, StoreMessage
from services.store.mapped_file import file_name
from services.store.mapped_file_queue import CorruptFileLayout, MappedFileQueue
from tests.conftest import read_queue
from tests.unit.store.store_api_helpers import disk_snapshot

SEGMENT_BYTES = 64 * 1024  # small_config's CommitLog segment size
TOPIC = "T"
RECORD_OVERHEAD = FIXED_OVERHEAD_IPV4 + len(TOPIC)  # an empty body, no properties: 92 bytes
MAX_BODY_BYTES = 48 * 1024  # small_config's max_message_size_bytes
FILLER_MAX_BYTES = 40_000  # below MAX_BODY_BYTES
BLANK = struct.Struct(">iI")  # total_size, magic


# --------------------------------------------------------------------------- helpers


def sized(total: int, seed: int) -> StoreMessage:
    """A message on ``T``/0 whose CommitLog record is exactly ``total`` bytes."""
    assert total >= RECORD_OVERHEAD
    return StoreMessage(
        topic=TOPIC, queue_id=0, body=random.Random(seed).randbytes(total - RECORD_OVERHEAD)
    )


def filler_sizes(start: int, end: int) -> list[int]:
    """Record sizes that exactly cover ``[start, end)`` of one segment."""
    sizes = []
    gap = end - start
    while gap:
        size = gap if gap <= FILLER_MAX_BYTES else min(FILLER_MAX_BYTES, gap - RECORD_OVERHEAD)
        sizes.append(size)
        gap -= size
    return sizes


def put_each(store: MessageStore, msgs: Sequence[StoreMessage], batched: bool) -> list[PutResult]:
    results = store.put_messages(msgs) if batched else [store.put_message(m) for m in msgs]
    assert [r.status for r in results] == [PutStatus.PUT_OK] * len(msgs), results
    return results


def segment_bytes(root: Path, start: int) -> bytes:
    with open(root / "commitlog" / file_name(start), "rb") as f:
        return f.read()


def assert_readable(
    store: MessageStore, msgs: Sequence[StoreMessage], results: Sequence[PutResult]
) -> None:
    """look_message and get_messages serve every message, in order, with its body."""
    for msg, result in zip(msgs, results, strict=True):
        record = store.look_message(result.commitlog_offset)
        assert record is not None, result
        assert bytes(record.body) == msg.body
        assert record.commitlog_offset == result.commitlog_offset
        assert record.total_size == result.wrote_bytes
    expected = [
        (r.queue_offset, r.commitlog_offset, m.body) for m, r in zip(msgs, results, strict=True)
    ]
    assert read_queue(store, TOPIC, 0) == expected
    assert [r.queue_offset for r in results] == list(range(len(results)))


def assert_refused_without_a_trace(store: MessageStore, bad: Sequence[StoreMessage]) -> None:
    """``bad`` is refused with MESSAGE_ILLEGAL and not one byte under the root changes."""
    store.wait_dispatched()
    before = disk_snapshot(store.root)
    max_before = store.commitlog.max_offset
    queue_max_before = store.max_offset(TOPIC, 0)
    for results in ([store.put_message(m) for m in bad], store.put_messages(bad)):
        for result in results:
            assert result.status == PutStatus.MESSAGE_ILLEGAL, result
            assert result.error
            assert (result.msg_id, result.commitlog_offset, result.queue_offset) == ("", -1, -1)
    store.flush()
    assert store.commitlog.max_offset == max_before
    assert store.max_offset(TOPIC, 0) == queue_max_before
    assert disk_snapshot(store.root) == before
    # The refusal consumed no queue offset and no CommitLog space.
    good = store.put_message(sized(RECORD_OVERHEAD + 1, seed=77))
    assert good.status == PutStatus.PUT_OK
    assert good.queue_offset == queue_max_before
    left = SEGMENT_BYTES - max_before % SEGMENT_BYTES
    fits = good.wrote_bytes + BLANK_MARKER_SIZE <= left
    assert good.commitlog_offset == (max_before if fits else max_before + left)
    assert store.verify() == []


# --------------------------------------------------------------------------- blank marker

# How many bytes of the segment would be left after the probe record, had it
# been written where the previous record ended: 0..7 cannot hold the 8-byte
# marker (so the probe moves on), 8 is exactly a marker, larger values leave
# room that the following record cannot use.
SLACKS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 99, 100, 4096]
PROBE_SIZES = [RECORD_OVERHEAD, 1000, 20_000]


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "one-batch"])
@pytest.mark.parametrize("probe_size", PROBE_SIZES)
@pytest.mark.parametrize("slack", SLACKS)
def test_end_of_segment_blank_marker(
    make_store: Callable[..., MessageStore], slack: int, probe_size: int, batched: bool
) -> None:
    probe_at = SEGMENT_BYTES - probe_size - slack
    fits = slack >= BLANK_MARKER_SIZE
    # After a probe that fits, the follower is one byte too big for what is left.
    follower_size = max(RECORD_OVERHEAD, slack - BLANK_MARKER_SIZE + 1)
    sizes = [*filler_sizes(0, probe_at), probe_size, follower_size]
    msgs = [sized(size, seed) for seed, size in enumerate(sizes)]

    store = make_store()
    results = put_each(store, msgs, batched)
    offsets = [r.commitlog_offset for r in results]
    assert [r.wrote_bytes for r in results] == sizes
    assert offsets[:-2] == [sum(sizes[:i]) for i in range(len(sizes) - 2)]
    if fits:
        assert offsets[-2:] == [probe_at, SEGMENT_BYTES]
        blank_at, blank_size = probe_at + probe_size, slack
    else:
        assert offsets[-2:] == [SEGMENT_BYTES, SEGMENT_BYTES + probe_size]
        blank_at, blank_size = probe_at, probe_size + slack
    assert blank_at + blank_size == SEGMENT_BYTES
    assert store.commitlog.max_offset == results[-1].commitlog_offset + results[-1].wrote_bytes

    store.flush()
    first = segment_bytes(store.root, 0)
    assert BLANK.unpack_from(first, blank_at) == (blank_size, MAGIC_BLANK)
    assert first[blank_at + BLANK_MARKER_SIZE :] == bytes(blank_size - BLANK_MARKER_SIZE)
    assert store.look_message(blank_at) is None  # a marker is not a message
    assert_readable(store, msgs, results)
    assert store.verify() == []

    # Recovery walks over the marker and the next record continues where it should.
    end = store.commitlog.max_offset
    store.shutdown()
    store = make_store()
    assert store.commitlog.max_offset == end
    assert_readable(store, msgs, results)
    more = store.put_message(sized(RECORD_OVERHEAD + 10, seed=999))
    assert (more.status, more.commitlog_offset, more.queue_offset) == (
        PutStatus.PUT_OK,
        end,
        len(msgs),
    )
    assert store.verify() == []


def test_marker_only_remains_when_the_next_record_fits_to_the_last_8_bytes(
    make_store: Callable[..., MessageStore],
) -> None:
    """A record may end exactly 8 bytes before the segment end; the 8 bytes become the marker."""
    store = make_store()
    sizes = [*filler_sizes(0, SEGMENT_BYTES - 200), 200 - BLANK_MARKER_SIZE, RECORD_OVERHEAD]
    msgs = [sized(size, seed) for seed, size in enumerate(sizes)]
    results = put_each(store, msgs, batched=False)
    assert [r.commitlog_offset for r in results[-2:]] == [SEGMENT_BYTES - 200, SEGMENT_BYTES]
    store.flush()
    assert BLANK.unpack_from(segment_bytes(store.root, 0), SEGMENT_BYTES - BLANK_MARKER_SIZE) == (
        BLANK_MARKER_SIZE,
        MAGIC_BLANK,
    )
    assert_readable(store, msgs, results)
    assert store.verify() == []


def test_max_size_record_fills_an_empty_segment(make_store: Callable[..., MessageStore]) -> None:
    """The largest record is a segment minus the marker; it moves to a fresh segment whole."""
    store = make_store(max_message_size_bytes=1024 * 1024)
    largest = SEGMENT_BYTES - BLANK_MARKER_SIZE
    msgs = [sized(RECORD_OVERHEAD, seed=1), sized(largest, seed=2), sized(largest, seed=3)]
    results = put_each(store, msgs, batched=False)
    assert [r.commitlog_offset for r in results] == [0, SEGMENT_BYTES, 2 * SEGMENT_BYTES]
    store.flush()
    assert BLANK.unpack_from(segment_bytes(store.root, 0), RECORD_OVERHEAD) == (
        SEGMENT_BYTES - RECORD_OVERHEAD,
        MAGIC_BLANK,
    )
    assert BLANK.unpack_from(segment_bytes(store.root, SEGMENT_BYTES), largest) == (
        BLANK_MARKER_SIZE,
        MAGIC_BLANK,
    )
    assert_readable(store, msgs, results)
    assert store.verify() == []


# --------------------------------------------------------------------------- lookup and names


def test_find_by_offset_across_many_segments(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    msgs = [sized(3000 + i, seed=i) for i in range(150)]
    results = put_each(store, msgs, batched=False)
    files = store.commitlog.files
    segments = list(files.files)
    assert len(segments) >= 6
    for n, mf in enumerate(segments):
        start = n * SEGMENT_BYTES
        assert (mf.file_from_offset, mf.path.name) == (start, file_name(start))
        for offset in (start, start + 1, start + SEGMENT_BYTES // 2, start + SEGMENT_BYTES - 1):
            assert files.find(offset) is mf, offset
    end = len(segments) * SEGMENT_BYTES
    for outside in (-1, -SEGMENT_BYTES, end, end + 1, end + 10 * SEGMENT_BYTES):
        assert files.find(outside) is None, outside
    # Every record is found in the segment its offset names.
    for result in results:
        mf = files.find(result.commitlog_offset)
        assert mf is segments[result.commitlog_offset // SEGMENT_BYTES]
    assert_readable(store, msgs, results)
    assert store.look_message(end) is None
    assert store.look_message(-1) is None
    assert store.verify() == []


def test_find_in_a_queue_that_does_not_start_at_zero(tmp_path: Path) -> None:
    """Before the first file (deleted segments) and past the last, find answers None."""
    size = 4096
    first = 7 * size
    queue = MappedFileQueue(tmp_path / "q", size)
    try:
        created = [queue.last_file_or_create(first + 100)]
        for _ in range(3):
            created[-1].write(bytes([len(created)]) * size)  # full: next call makes the next
            created.append(queue.last_file_or_create())
        assert [mf.file_from_offset for mf in created] == [first + n * size for n in range(4)]
        assert queue.min_offset == first
        end = first + 4 * size
        for n, mf in enumerate(created):
            start = first + n * size
            for offset in (start, start + size // 2, start + size - 1):
                assert queue.find(offset) is mf
        for outside in (0, first - 1, first - size, end, end + size):
            assert queue.find(outside) is None, outside
    finally:
        queue.close()

    reloaded = MappedFileQueue(tmp_path / "q", size)
    try:
        assert reloaded.load() == []
        assert [mf.file_from_offset for mf in reloaded.files] == [
            first + n * size for n in range(4)
        ]
        assert reloaded.find(first - 1) is None
        assert reloaded.find(first) is reloaded.files[0]
        assert reloaded.find(end - 1) is reloaded.files[-1]
        assert reloaded.find(end) is None
    finally:
        reloaded.close()


@pytest.mark.parametrize("segment_size", [4096, SEGMENT_BYTES, 100_000])
def test_segments_are_named_by_start_offset_and_sized_exactly(
    make_store: Callable[..., MessageStore], segment_size: int
) -> None:
    store = make_store(mapped_file_size_commitlog=segment_size)
    results: list[PutResult] = []
    i = 0
    while store.commitlog.max_offset < 4 * segment_size + segment_size // 2:
        results.append(store.put_message(sized(RECORD_OVERHEAD + 900 + i % 50, seed=i)))
        i += 1
    assert all(r.status == PutStatus.PUT_OK for r in results)
    store.shutdown()

    directory = store.root / "commitlog"
    segments = sorted(p for p in directory.iterdir() if not p.name.endswith(".tmp"))
    starts = [n * segment_size for n in range(5)]
    assert [p.name for p in segments] == [f"{start:020d}" for start in starts]
    assert all(len(p.name) == 20 for p in segments)
    assert [p.stat().st_size for p in segments] == [segment_size] * 5
    # A pre-allocated next segment, if any, is named for the offset after the last.
    for tmp in directory.glob("*.tmp"):
        assert tmp.name == f"{5 * segment_size:020d}.tmp"
    # The first record of each segment sits at the offset in the segment's name.
    firsts = {r.commitlog_offset for r in results if r.commitlog_offset % segment_size == 0}
    assert firsts == set(starts)

    store = make_store(mapped_file_size_commitlog=segment_size)
    for result in results[:: max(1, len(results) // 20)]:
        record = store.look_message(result.commitlog_offset)
        assert record is not None and record.total_size == result.wrote_bytes
    assert store.verify() == []


def test_a_segment_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    """Segments are exactly the configured size; another size is a layout error, not data."""
    directory = tmp_path / "q"
    queue = MappedFileQueue(directory, 4096)
    queue.last_file_or_create(0)
    queue.close()
    with open(directory / file_name(0), "r+b") as f:
        f.truncate(4000)
    with pytest.raises(CorruptFileLayout, match="4000 bytes"):
        MappedFileQueue(directory, 4096).load()


# --------------------------------------------------------------------------- records that never fit


@pytest.mark.parametrize("near_segment_end", [False, True], ids=["mid-segment", "segment-end"])
@pytest.mark.parametrize("over_bytes", [1, 3 * MAX_BODY_BYTES])
def test_body_over_max_message_size_is_illegal_and_writes_nothing(
    make_store: Callable[..., MessageStore], over_bytes: int, near_segment_end: bool
) -> None:
    store = make_store()
    # Segment end: what is left is less than the bad record, so a writer that
    # laid the blank marker down before validating would change the file.
    end = SEGMENT_BYTES - 300 if near_segment_end else 7000
    put_each(
        store, [sized(size, seed) for seed, size in enumerate(filler_sizes(0, end))], batched=False
    )
    bad = StoreMessage(TOPIC, body=bytes(store.config.max_message_size_bytes + over_bytes))
    assert_refused_without_a_trace(store, [bad])


@pytest.mark.parametrize("extra", [1, 2, 100, SEGMENT_BYTES])
def test_record_bigger_than_a_segment_is_illegal_and_writes_nothing(
    make_store: Callable[..., MessageStore], extra: int
) -> None:
    """A body under max_message_size_bytes whose record still can never fit in a segment."""
    store = make_store(max_message_size_bytes=4 * SEGMENT_BYTES)
    put_each(store, [sized(SEGMENT_BYTES - 500, seed=1)], batched=False)
    bad = sized(SEGMENT_BYTES - BLANK_MARKER_SIZE + extra, seed=2)
    assert_refused_without_a_trace(store, [bad])


def test_oversize_on_an_empty_store_creates_no_segment(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    bad = StoreMessage(TOPIC, body=bytes(store.config.max_message_size_bytes + 1))
    assert store.put_message(bad).status == PutStatus.MESSAGE_ILLEGAL
    assert not list((store.root / "commitlog").glob("0*"))
    assert_refused_without_a_trace(store, [bad])


def test_body_of_exactly_max_message_size_is_stored(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    limit = store.config.max_message_size_bytes
    msg = StoreMessage(TOPIC, body=random.Random(5).randbytes(limit))
    result = store.put_message(msg)
    assert result.status == PutStatus.PUT_OK
    assert result.wrote_bytes == RECORD_OVERHEAD + limit
    assert_readable(store, [msg], [result])
    assert store.verify() == []
