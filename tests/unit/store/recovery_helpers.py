"""What the recovery tests share: an in-process crash, sample messages, byte-level damage.

A crash is simulated in-process by :func:`crash`: the background threads are
stopped without the clean-shutdown steps (no final flush, no checkpoint write,
the abort file stays) and the files are unmapped. Bytes written through the
mappings stay in the page cache, which is what a ``kill -9`` leaves behind.
The damage helpers write straight into the CommitLog segment files (layout in
docs/store-format.md).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from boltmq.wire.record import HEADS
from services.store import MessageStore, PutResult, PutStatus, StoreMessage
from services.store.mapped_file import file_name
from tests.conftest import quiet_disk, read_queue, small_config

SEGMENT_BYTES = 64 * 1024  # small_config's CommitLog segment size
HEAD_BYTES = HEADS[(False, False)].size  # record head with IPv4 hosts, up to body_length


@dataclass
class Written:
    """One acknowledged message: what was sent and where the store put it."""

    msg: StoreMessage
    result: PutResult

    @property
    def offset(self) -> int:
        return self.result.commitlog_offset

    @property
    def end(self) -> int:
        return self.result.commitlog_offset + self.result.wrote_bytes


def crash(store: MessageStore) -> None:
    """Stop ``store`` the way ``kill -9`` would: no final flush, checkpoint or abort removal."""
    store.running = False
    store.cleaner.stop()
    flusher, queue_flusher, dispatcher = store.flusher, store.queue_flusher, store.dispatcher
    assert flusher is not None and queue_flusher is not None
    flusher._stopped = True
    flusher._request.set()
    queue_flusher._stop.set()
    dispatcher._stopped = True
    dispatcher._wake.set()
    for thread in (flusher._thread, queue_flusher._thread, dispatcher._thread):
        if thread is not None:
            thread.join()
    store._close_files()
    store._release_lock()
    assert (store.root / "abort").exists()


def body_of(i: int, seed: int = 0, max_bytes: int = 1500) -> bytes:
    """A body that names ``i``, then 1 to ``max_bytes`` random bytes drawn from ``seed``."""
    rng = random.Random(seed * 1_000_003 + i)
    return f"{i}|".encode() + rng.randbytes(rng.randint(1, max_bytes))


def message(
    i: int, seed: int = 0, topic: str = "T", queues: int = 3, max_bytes: int = 1500
) -> StoreMessage:
    """Message ``i``: every one has tags, a key and a property (so properties are never empty)."""
    return StoreMessage(
        topic=topic,
        queue_id=i % queues,
        body=body_of(i, seed, max_bytes),
        tags=f"tag{i % 4}",
        keys=[f"key-{topic}-{i}"],
        properties={"n": str(i)},
    )


def put_all(store: MessageStore, msgs: Sequence[StoreMessage]) -> list[Written]:
    """Put ``msgs`` one by one; every one must be stored."""
    written = []
    for msg in msgs:
        result = store.put_message(msg)
        assert result.status == PutStatus.PUT_OK, result
        written.append(Written(msg, result))
    return written


def assert_served_exactly(store: MessageStore, written: Sequence[Written]) -> None:
    """The queues serve exactly ``written`` (in order) and the CommitLog holds each record."""
    by_queue: dict[tuple[str, int], list[Written]] = {}
    for w in written:
        by_queue.setdefault((w.msg.topic, w.msg.queue_id), []).append(w)
    for (topic, queue_id), ws in by_queue.items():
        expected = [(w.result.queue_offset, w.offset, w.msg.body) for w in ws]
        assert read_queue(store, topic, queue_id) == expected, f"{topic}/{queue_id}"
        assert store.max_offset(topic, queue_id) == len(ws)
    for w in written:
        record = store.look_message(w.offset)
        assert record is not None, w.offset
        assert bytes(record.body) == w.msg.body
        assert (record.topic, record.queue_id, record.tags) == (
            w.msg.topic,
            w.msg.queue_id,
            w.msg.tags,
        )
        assert record.keys == w.msg.keys and record.properties["n"] == w.msg.properties["n"]


def open_store(root: Path, **overrides: object) -> MessageStore:
    """A started store on ``root`` (for tests that cannot use the ``make_store`` fixture)."""
    store = MessageStore(small_config(root, **overrides), disk_usage=quiet_disk)
    store.start()
    return store


def segment_path(root: Path, offset: int) -> Path:
    """The CommitLog segment file that holds ``offset``."""
    return root / "commitlog" / file_name(offset - offset % SEGMENT_BYTES)


def patch_file(path: Path, position: int, data: bytes) -> None:
    """Overwrite ``path`` with ``data`` at ``position``."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def read_at(path: Path, position: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``path`` from ``position``."""
    with open(path, "rb") as f:
        f.seek(position)
        return f.read(size)


def zero_commitlog_from(root: Path, offset: int) -> None:
    """Zero the CommitLog from ``offset`` to the end of its segment (a lost tail)."""
    position = offset % SEGMENT_BYTES
    patch_file(segment_path(root, offset), position, bytes(SEGMENT_BYTES - position))


def flip_byte(root: Path, offset: int, mask: int = 0xFF) -> None:
    """XOR the CommitLog byte at ``offset`` with ``mask``."""
    path = segment_path(root, offset)
    position = offset % SEGMENT_BYTES
    old = read_at(path, position, 1)[0]
    patch_file(path, position, bytes([old ^ mask]))


def assert_zero_on_disk_from(root: Path, offset: int) -> None:
    """The CommitLog is zero from ``offset`` to the end of its segment."""
    position = offset % SEGMENT_BYTES
    tail = read_at(segment_path(root, offset), position, SEGMENT_BYTES)
    assert tail == bytes(len(tail)), f"stale bytes after the cut at {offset}"
