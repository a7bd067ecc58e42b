"""Flushing the CommitLog: group commit (each acknowledged append already in its consume
queue), flush timeouts, async catch-up, bytes on disk.

The on-disk checks read the segment files with ``open()`` and parse them with
the record layout of docs/store-format.md written out here, independently of the store's
own decoder.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from services.store import GetStatus, MessageStore, PutResult, PutStatus, StoreMessage
from services.store.checkpoint import CHECKPOINT_FILE_SIZE, decode_checkpoint

SEGMENT_BYTES = 64 * 1024  # small_config's CommitLog segment size
WRITERS = 64
MESSAGES_PER_WRITER = 15
QUEUES = 8
READ_BATCH = 32
NEVER_MS = 3_600_000  # a flush interval no test lives long enough to reach
TIMEOUT_ATTEMPTS_MAX = 200
SEQUENTIAL_PUTS = 200

# docs/store-format.md, IPv4 hosts: the fields the on-disk parser needs.
TOTAL_AND_MAGIC = struct.Struct(">iI")
MAGIC_MESSAGE = 0xDAA320A7
MAGIC_BLANK = 0xCBD43194
BODY_CRC_AT = 8
PHYSICAL_OFFSET_AT = 28
BODY_LENGTH_AT = 84
BODY_AT = 88
INT = struct.Struct(">i")
LONG = struct.Struct(">q")


# --------------------------------------------------------------------------- helpers


def body_of(writer: int, i: int) -> bytes:
    return f"writer-{writer}-message-{i}|".encode() * (5 + (writer * 7 + i) % 20)


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    """``(commitlog_offset, body)`` of every message the queue serves."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        got = store.get_messages(topic, queue_id, offset, READ_BATCH)
        if got.status != GetStatus.FOUND:
            break
        out.extend((m.commitlog_offset, bytes(m.body)) for m in got.messages)
        offset = got.next_begin_offset
    return out


def parse_segments_on_disk(commitlog_dir: Path) -> dict[int, bytes]:
    """``{commitlog_offset: body}`` of every record in the segment files, read with open().

    Checks on the way: each record names its own offset and carries its body
    CRC, a blank marker runs exactly to the end of its segment, and after the
    last record of the log there is nothing but zeros.
    """
    records: dict[int, bytes] = {}
    segments = sorted(p for p in commitlog_dir.iterdir() if not p.name.endswith(".tmp"))
    for n, path in enumerate(segments):
        with open(path, "rb") as f:
            data = f.read()
        start = int(path.name)
        assert len(data) == SEGMENT_BYTES and start == n * SEGMENT_BYTES, path
        position = 0
        while position + TOTAL_AND_MAGIC.size <= len(data):
            total, magic = TOTAL_AND_MAGIC.unpack_from(data, position)
            if total == 0 and magic == 0:
                assert data[position:] == bytes(len(data) - position), f"junk after {path}"
                break
            if magic == MAGIC_BLANK:
                assert position + total == SEGMENT_BYTES, (path.name, position, total)
                break
            assert magic == MAGIC_MESSAGE, (path.name, position, hex(magic))
            (physical,) = LONG.unpack_from(data, position + PHYSICAL_OFFSET_AT)
            (body_length,) = INT.unpack_from(data, position + BODY_LENGTH_AT)
            body = data[position + BODY_AT : position + BODY_AT + body_length]
            assert physical == start + position
            assert INT.unpack_from(data, position + BODY_CRC_AT)[0] == zlib.crc32(body) & 0x7FFFFFFF
            records[physical] = body
            position += total
    return records


def run_writers(
    store: MessageStore, writers: int, per_writer: int
) -> tuple[list[list[tuple[PutResult, int, int]]], list[BaseException]]:
    """``writers`` threads put ``per_writer`` messages each, all starting together.

    Each result comes with the CommitLog's flushed offset and the end of the
    message's queue, both seen right after the put returned.
    """
    barrier = threading.Barrier(writers)
    outcomes: list[list[tuple[PutResult, int, int]]] = [[] for _ in range(writers)]
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            barrier.wait()
            for i in range(per_writer):
                result = store.put_message(
                    StoreMessage("T", body=body_of(writer, i), queue_id=writer % QUEUES)
                )
                flushed = store.commitlog.flushed_offset
                outcomes[writer].append((result, flushed, store.max_offset("T", writer % QUEUES)))
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes, errors


# --------------------------------------------------------------------------- SYNC_FLUSH


def test_sync_flush_group_commit_shares_fsyncs(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(flush_disk_type="SYNC_FLUSH")
    assert store.flusher is not None
    fsyncs_before = store.flusher.fsync_count
    outcomes, errors = run_writers(store, WRITERS, MESSAGES_PER_WRITER)
    fsyncs = store.flusher.fsync_count - fsyncs_before
    assert errors == []
    total = WRITERS * MESSAGES_PER_WRITER
    results = [r for per_writer in outcomes for r, _, _ in per_writer]
    assert len(results) == total
    assert [r.status for r in results] == [PutStatus.PUT_OK] * total
    # An acknowledged SYNC_FLUSH put is already flushed when put_message returns, and
    # already in its consume queue (read-your-writes).
    for per_writer in outcomes:
        for result, flushed, queue_end in per_writer:
            assert flushed >= result.commitlog_offset + result.wrote_bytes, result
            assert queue_end > result.queue_offset, (result, queue_end)
    # Grouping: fewer fsync rounds than messages.
    assert 0 < fsyncs < total, fsyncs
    assert store.commitlog.max_offset > 3 * SEGMENT_BYTES

    # Every message is readable, at a distinct place, each queue without gaps.
    offsets = [r.commitlog_offset for r in results]
    assert len(set(offsets)) == total
    for writer, per_writer in enumerate(outcomes):
        for i, (result, _, _) in enumerate(per_writer):
            record = store.look_message(result.commitlog_offset)
            assert record is not None and bytes(record.body) == body_of(writer, i)
    for queue_id in range(QUEUES):
        expected = {
            (r.commitlog_offset, body_of(w, i)): r.queue_offset
            for w, per_writer in enumerate(outcomes)
            if w % QUEUES == queue_id
            for i, (r, _, _) in enumerate(per_writer)
        }
        assert sorted(expected.values()) == list(range(len(expected)))
        served = read_queue(store, "T", queue_id)
        assert sorted(served) == sorted(expected)
        assert [expected[entry] for entry in served] == list(range(len(served)))
    # Within one writer, later puts land later in the log.
    for per_writer in outcomes:
        mine = [r.commitlog_offset for r, _, _ in per_writer]
        assert mine == sorted(mine)
    assert store.verify() == []


def test_sync_flush_put_is_readable_from_its_queue_when_acknowledged(
    make_store: Callable[..., MessageStore],
) -> None:
    """Under SYNC_FLUSH the flusher dispatches what an fsync made durable before it
    answers the appends: a read right after each put finds it (both put paths)."""
    store = make_store(flush_disk_type="SYNC_FLUSH")
    for i in range(SEQUENTIAL_PUTS):
        body = f"ryw-{i}".encode()
        if i % 2:
            result = asyncio.run(store.put_messages_async([StoreMessage("T", body=body)]))[0]
        else:
            result = store.put_message(StoreMessage("T", body=body))
        assert result.status is PutStatus.PUT_OK
        got = store.get_messages("T", 0, result.queue_offset, 1)
        assert got.status is GetStatus.FOUND, (i, got.status)
        assert [bytes(m.body) for m in got.messages] == [body]


def test_sync_flush_acknowledges_a_durable_put_whose_dispatch_failed(
    make_store: Callable[..., MessageStore], caplog: pytest.LogCaptureFixture
) -> None:
    """The work after an fsync (dispatch) failing never turns a durable append into a
    FLUSH_DISK_TIMEOUT: the flusher logs it and answers the append all the same."""
    store = make_store(flush_disk_type="SYNC_FLUSH")
    assert store.flusher is not None

    def broken_dispatch() -> int:
        raise OSError("no space left for the consume queue")

    store.flusher.on_flushed = broken_dispatch
    result = store.put_message(StoreMessage("T", body=b"durable"))
    assert result.status is PutStatus.PUT_OK
    assert store.commitlog.flushed_offset >= result.commitlog_offset + result.wrote_bytes
    assert "the work after a flush failed" in caplog.text
    assert "no space left for the consume queue" in caplog.text


def test_flush_disk_timeout_still_stores_the_message(
    make_store: Callable[..., MessageStore],
) -> None:
    """With no time to wait for the fsync the put says FLUSH_DISK_TIMEOUT, but it is stored."""
    store = make_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=0)
    msgs: list[StoreMessage] = []
    results: list[PutResult] = []
    for i in range(TIMEOUT_ATTEMPTS_MAX):
        msgs.append(StoreMessage("T", body=f"timeout-{i}".encode() * 10, keys=[f"k{i}"]))
        results.append(store.put_message(msgs[-1]))
        if results[-1].status == PutStatus.FLUSH_DISK_TIMEOUT:
            break
    statuses = {r.status for r in results}
    assert PutStatus.FLUSH_DISK_TIMEOUT in statuses
    assert statuses <= {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT}
    timed_out = results[-1]
    assert timed_out.status.stored
    assert timed_out.msg_id and timed_out.commitlog_offset >= 0
    # Stored at once: readable straight from the CommitLog before any flush.
    record = store.look_message(timed_out.commitlog_offset)
    assert record is not None and bytes(record.body) == msgs[-1].body
    assert record.queue_offset == timed_out.queue_offset == len(results) - 1
    # Once flushed it is dispatched like any other message.
    store.flush()
    assert store.commitlog.flushed_offset == store.commitlog.max_offset
    assert read_queue(store, "T", 0) == [
        (r.commitlog_offset, m.body) for m, r in zip(msgs, results, strict=True)
    ]
    found = store.query_messages("T", f"k{len(results) - 1}")
    assert [m.commitlog_offset for m in found] == [timed_out.commitlog_offset]
    assert store.verify() == []

    store.shutdown()
    store = make_store(flush_disk_type="SYNC_FLUSH")
    assert read_queue(store, "T", 0) == [
        (r.commitlog_offset, m.body) for m, r in zip(msgs, results, strict=True)
    ]
    assert store.verify() == []


# --------------------------------------------------------------------------- ASYNC_FLUSH


def test_async_flush_catches_up_on_store_flush(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(
        flush_interval_commitlog_ms=NEVER_MS,
        flush_commitlog_thorough_interval_ms=NEVER_MS,
        flush_interval_consume_queue_ms=NEVER_MS,
    )
    assert store.flusher is not None and store.checkpoint is not None
    checkpoint_path = store.root / "checkpoint"
    for round_ in range(2):
        msgs = [
            StoreMessage("T", body=bytes([round_ + 1]) * (1000 + i), queue_id=i % 2)
            for i in range(150)
        ]
        results = [store.put_message(m) for m in msgs]
        assert all(r.status == PutStatus.PUT_OK for r in results)  # no wait under ASYNC
        end = store.commitlog.max_offset
        assert store.commitlog.flushed_offset < end  # nothing forced it yet

        store.flush()
        assert store.commitlog.flushed_offset == end
        assert store.flusher.flushed_offset == end
        for mf in store.commitlog.files.files:
            assert mf.flushed_position == mf.committed_position == mf.wrote_position
        # The checkpoint on disk records the last flushed CommitLog and queue entry.
        with open(checkpoint_path, "rb") as f:
            state = decode_checkpoint(f.read(CHECKPOINT_FILE_SIZE))
        assert state.physic_msg_timestamp == results[-1].store_timestamp
        assert state.logics_msg_timestamp == results[-1].store_timestamp
    assert store.verify() == []


# --------------------------------------------------------------------------- bytes on disk


@pytest.mark.parametrize("flush_disk_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_commitlog_files_hold_every_message_after_shutdown(
    make_store: Callable[..., MessageStore], flush_disk_type: str
) -> None:
    store = make_store(
        flush_disk_type=flush_disk_type,
        flush_interval_commitlog_ms=NEVER_MS,
        flush_commitlog_thorough_interval_ms=NEVER_MS,
    )
    msgs = [
        StoreMessage(
            "T",
            body=f"{i}:".encode() + bytes([i % 251]) * (700 + 13 * i),
            queue_id=i % 3,
            tags=f"t{i % 2}",
            keys=[f"k{i}"],
        )
        for i in range(160)
    ]
    results: list[PutResult] = []
    for start in range(0, len(msgs), 16):  # singles and batches
        chunk = msgs[start : start + 16]
        results += (
            store.put_messages(chunk) if start % 32 else [store.put_message(m) for m in chunk]
        )
    assert [r.status for r in results] == [PutStatus.PUT_OK] * len(msgs)
    assert store.commitlog.max_offset > 3 * SEGMENT_BYTES
    store.shutdown()

    on_disk = parse_segments_on_disk(store.root / "commitlog")
    assert on_disk == {r.commitlog_offset: m.body for m, r in zip(msgs, results, strict=True)}
