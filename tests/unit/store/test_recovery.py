"""Recovery (docs/store-format.md): clean restarts, crashes, damaged tails, lost consume queues.

A crash is simulated in-process by :func:`crash`: the background threads are
stopped without the clean-shutdown steps (no final flush, no checkpoint write,
the abort file stays) and the files are unmapped. Bytes written through the
mappings stay in the page cache, which is what a ``kill -9`` leaves behind;
one test does the real thing with a SIGKILLed writer process.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boltmq.wire.record import HEADS
from services.store import MessageStore, PutResult, PutStatus, StoreMessage
from services.store.checkpoint import CheckpointState, encode_checkpoint
from services.store.mapped_file import file_name
from tests.conftest import quiet_disk, read_queue, small_config

REPO_ROOT = Path(__file__).resolve().parents[3]
SEGMENT_BYTES = 64 * 1024  # small_config's CommitLog segment size
HEAD_BYTES = HEADS[(False, False)].size  # record head with IPv4 hosts, up to body_length
BODY_LENGTH_AT = HEAD_BYTES - 4
PHYSICAL_OFFSET_AT = 28
KILL_ACKS_WANTED = 400
KILL_TIMEOUT_S = 60


# --------------------------------------------------------------------------- helpers


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
    store = MessageStore(small_config(root, **overrides), disk_usage=quiet_disk)
    store.start()
    return store


def segment_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / file_name(offset - offset % SEGMENT_BYTES)


def patch_file(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def read_at(path: Path, position: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(position)
        return f.read(size)


def zero_commitlog_from(root: Path, offset: int) -> None:
    """Zero the CommitLog from ``offset`` to the end of its segment (a lost tail)."""
    position = offset % SEGMENT_BYTES
    patch_file(segment_path(root, offset), position, bytes(SEGMENT_BYTES - position))


def flip_byte(root: Path, offset: int, mask: int = 0xFF) -> None:
    path = segment_path(root, offset)
    position = offset % SEGMENT_BYTES
    old = read_at(path, position, 1)[0]
    patch_file(path, position, bytes([old ^ mask]))


def assert_zero_on_disk_from(root: Path, offset: int) -> None:
    position = offset % SEGMENT_BYTES
    tail = read_at(segment_path(root, offset), position, SEGMENT_BYTES)
    assert tail == bytes(len(tail)), f"stale bytes after the cut at {offset}"


def queue_files(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def properties_bytes(w: Written) -> int:
    """Length of the record's properties section (what is left after the fixed parts)."""
    topic_field = 1 + len(w.msg.topic.encode())
    return w.result.wrote_bytes - HEAD_BYTES - len(w.msg.body) - topic_field - 2


def detectable_ranges(w: Written) -> list[tuple[int, int]]:
    """Byte ranges (relative to the record start) whose change recovery must detect.

    The record protects only the body with a CRC; total_size, magic, the
    physical offset and the three length fields are checked structurally. The
    other header fields (flag, hosts, timestamps...) and the topic/properties
    bytes carry no check, so damage there is undetectable by design and is
    not generated here.
    """
    body_end = HEAD_BYTES + len(w.msg.body)
    topic_len_at = body_end
    props_len_at = topic_len_at + 1 + len(w.msg.topic.encode())
    return [
        (0, 12),
        (PHYSICAL_OFFSET_AT, PHYSICAL_OFFSET_AT + 8),
        (BODY_LENGTH_AT, body_end),
        (topic_len_at, topic_len_at + 1),
        (props_len_at, props_len_at + 2),
    ]


# --------------------------------------------------------------------------- clean restart


def test_clean_restart_brings_everything_back(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    msgs = [message(i, topic=("T" if i % 2 else "U")) for i in range(240)]
    written = put_all(store, msgs)
    end = store.commitlog.max_offset
    assert end > 2 * SEGMENT_BYTES  # several segments
    store.shutdown()
    assert not (store.root / "abort").exists()

    store = make_store()
    report = store.recovery
    assert report is not None
    assert report.clean is True
    assert report.truncated_bytes == 0
    assert report.commitlog_max_offset == end == store.commitlog.max_offset
    assert report.reput_offset == end  # every queue was already dispatched to the end
    assert not any("truncated" in note or "removed" in note for note in report.notes)
    assert (store.root / "abort").exists()
    assert_served_exactly(store, written)
    assert [m.msg_id for m in store.query_messages("T", "key-T-7")] == [written[7].result.msg_id]

    # New appends continue every queue where it stopped, after the old CommitLog end.
    more = put_all(store, [message(1000 + i, topic=t) for t in ("T", "U") for i in range(3)])
    for w in more:
        assert w.result.queue_offset == sum(
            1
            for old in written
            if (old.msg.topic, old.msg.queue_id) == (w.msg.topic, w.msg.queue_id)
        )
    assert more[0].offset >= end
    store.wait_dispatched()
    assert_served_exactly(store, written + more)
    assert store.verify() == []


# --------------------------------------------------------------------------- crash


def test_crash_recovery_redispatches_every_queue(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(150)])
    end = store.commitlog.max_offset
    crash(store)

    store = make_store()
    report = store.recovery
    assert report is not None
    assert report.clean is False
    assert report.commitlog_max_offset == end
    assert report.truncated_bytes == 0
    # The queues were cut back to the recovery start and rebuilt by re-dispatch.
    assert report.reput_offset == report.start_offset
    if report.start_offset == 0:
        assert sum("entries past CommitLog offset 0 removed" in n for n in report.notes) == 3
    assert store.dispatcher.reput_offset == end
    assert_served_exactly(store, written)
    for w in written[::17]:
        assert [m.commitlog_offset for m in store.query_messages("T", w.msg.keys[0])] == [w.offset]

    more = put_all(store, [message(150 + i) for i in range(3)])
    assert [w.result.queue_offset for w in more] == [50, 50, 50]
    store.wait_dispatched()
    assert_served_exactly(store, written + more)
    assert store.verify() == []


def test_crash_recovery_starts_at_the_segment_before_the_checkpoint(
    make_store: Callable[..., MessageStore],
) -> None:
    """A checkpoint newer than every record: only the last segment is re-dispatched."""
    store = make_store()
    written = put_all(store, [message(i) for i in range(160)])
    root = store.root
    last_segment = written[-1].offset - written[-1].offset % SEGMENT_BYTES
    assert last_segment >= 2 * SEGMENT_BYTES
    crash(store)
    future_ms = time.time_ns() // 1_000_000 + 60_000
    (root / "checkpoint").write_bytes(
        encode_checkpoint(CheckpointState(future_ms, future_ms, future_ms))
    )

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False
    assert report.start_offset == report.reput_offset == last_segment
    assert_served_exactly(store, written)
    # Records of the re-dispatched segment are indexed once, not twice.
    for w in written[-5:]:
        assert [m.commitlog_offset for m in store.query_messages("T", w.msg.keys[0])] == [w.offset]
    assert store.verify() == []


# --------------------------------------------------------------------------- damaged tail


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_damaged_tail_is_cut_at_the_first_bad_record(data: st.DataObject) -> None:
    count = data.draw(st.integers(2, 90), label="messages")
    seed = data.draw(st.integers(0, 1 << 16), label="seed")
    mode = data.draw(st.sampled_from(["zero_tail", "flip", "smear"]), label="mode")
    crashed = data.draw(st.booleans(), label="crashed")  # else: damaged after a clean stop
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        store = open_store(root)
        written = put_all(store, [message(i, seed, max_bytes=3000) for i in range(count)])
        if crashed:
            crash(store)
        else:
            store.shutdown()

        last_segment = written[-1].offset - written[-1].offset % SEGMENT_BYTES
        candidates = [i for i, w in enumerate(written) if w.offset >= last_segment]
        victim_index = data.draw(st.sampled_from(candidates), label="victim")
        victim = written[victim_index]
        if mode == "zero_tail":
            # Zeroing from inside the properties would only blank undetectable bytes.
            relative = data.draw(
                st.integers(0, victim.result.wrote_bytes - properties_bytes(victim) - 1), label="at"
            )
            zero_commitlog_from(root, victim.offset + relative)
        else:
            lo, hi = data.draw(st.sampled_from(detectable_ranges(victim)), label="field")
            relative = data.draw(st.integers(lo, hi - 1), label="at")
            length = 1 if mode == "flip" else data.draw(st.integers(2, 16), label="length")
            masks = data.draw(
                st.lists(st.integers(1, 255), min_size=length, max_size=length), label="masks"
            )
            for k, mask in enumerate(masks):
                if k and (victim.offset + relative + k) % SEGMENT_BYTES == 0:
                    break  # stay inside the segment
                flip_byte(root, victim.offset + relative + k, mask)

        store = open_store(root)
        try:
            report = store.recovery
            assert report is not None and report.clean is not crashed
            assert report.commitlog_max_offset == victim.offset == store.commitlog.max_offset
            # Zeros over the whole size and magic read as the end of data, not damage.
            size_bytes = victim.result.wrote_bytes.to_bytes(4, "big")
            silent = mode == "zero_tail" and size_bytes[:relative] == bytes(relative)
            if not silent:
                assert report.truncated_bytes > 0
                assert any("invalid record" in note for note in report.notes), report.notes
            assert_zero_on_disk_from(root, victim.offset)
            survivors = written[:victim_index]
            assert_served_exactly(store, survivors)
            for w in written[victim_index:]:
                assert store.look_message(w.offset) is None
            for queue_id in range(3):  # queues left with no survivor included
                assert store.max_offset("T", queue_id) == sum(
                    1 for w in survivors if w.msg.queue_id == queue_id
                )
            assert store.verify() == []
        finally:
            store.shutdown()


# --------------------------------------------------------------------------- consume queues


@pytest.mark.parametrize("damage", ["delete", "zero", "cut_short"])
def test_lost_consume_queues_are_rebuilt_from_the_commitlog(
    make_store: Callable[..., MessageStore], damage: str
) -> None:
    """Crash after the CommitLog reached disk but before the consume queues did."""
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    original = queue_files(root)
    crash(store)
    (root / "checkpoint").unlink()  # zero timestamps: re-dispatch from the first segment
    cq_dir = root / "consumequeue" / "T"
    if damage == "delete":
        shutil.rmtree(root / "consumequeue")
    for queue_id in range(3):
        path = cq_dir / str(queue_id) / file_name(0)
        if damage == "zero":
            patch_file(path, 0, bytes(path.stat().st_size))
        elif damage == "cut_short":  # the last 10 entries never reached the disk
            patch_file(path, 30 * 20, bytes(10 * 20))

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False and report.start_offset == 0
    assert_served_exactly(store, written)
    assert queue_files(root) == original
    assert store.verify() == []


def test_queue_entries_past_the_commitlog_end_are_removed_after_a_crash(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    crash(store)
    cut = 100
    zero_commitlog_from(root, written[cut].offset)  # the CommitLog tail never reached disk
    (root / "checkpoint").unlink()

    store = make_store()
    report = store.recovery
    assert report is not None and report.commitlog_max_offset == written[cut].offset
    assert_served_exactly(store, written[:cut])
    for queue_id in range(3):
        assert store.max_offset("T", queue_id) == sum(
            1 for w in written[:cut] if w.msg.queue_id == queue_id
        )
    assert store.verify() == []


def test_queue_entries_past_the_commitlog_end_are_removed_on_a_clean_start(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    written = put_all(store, [message(i) for i in range(120)])
    root = store.root
    store.shutdown()
    cut = 95
    zero_commitlog_from(root, written[cut].offset)

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is True
    assert report.commitlog_max_offset == written[cut].offset
    removed = [n for n in report.notes if "removed" in n]
    assert len(removed) == 3, report.notes  # every queue had entries past the new end
    assert_served_exactly(store, written[:cut])
    for w in written[cut:]:
        assert store.look_message(w.offset) is None
    more = put_all(store, [message(500 + i) for i in range(3)])
    assert more[0].offset == written[cut].offset
    assert sorted(w.result.queue_offset for w in more) == sorted(
        w.result.queue_offset for w in written[cut : cut + 3]
    )
    store.wait_dispatched()
    assert_served_exactly(store, written[:cut] + more)
    assert store.verify() == []


def test_queues_and_index_rebuilt_from_the_commitlog_equal_the_originals(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    # 1100 messages in queue T/0 spill into a second 1000-entry consume-queue file.
    msgs = [message(i, topic="T", queues=1, max_bytes=60) for i in range(1100)]
    msgs += [message(i, topic="V", queues=4, max_bytes=400) for i in range(200)]
    random.Random(7).shuffle(msgs)
    written = put_all(store, msgs)
    root = store.root
    original = queue_files(root)
    assert "T/0/" + file_name(1000 * 20) in original
    crash(store)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "checkpoint").unlink()

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False and report.start_offset == 0
    assert queue_files(root) == original
    assert_served_exactly(store, written)
    for w in written:
        found = store.query_messages(w.msg.topic, w.msg.keys[0])
        assert [m.commitlog_offset for m in found] == [w.offset], w.msg.keys[0]
    assert store.verify() == []


# --------------------------------------------------------------------------- second crash


def test_second_crash_after_a_truncation_resurrects_nothing(
    make_store: Callable[..., MessageStore],
) -> None:
    """New records exactly as long as the cut ones end on an old record boundary.

    Were the cut bytes not zeroed, the old record there would be whole, with
    its own offset inside it, and a second recovery would serve it again.
    """
    store = make_store()
    written = put_all(store, [message(i) for i in range(60)])
    root = store.root
    crash(store)
    victim = 40
    flip_byte(root, written[victim].offset + HEAD_BYTES)  # first body byte: CRC mismatch

    store = make_store()
    assert store.recovery is not None
    assert store.recovery.commitlog_max_offset == written[victim].offset
    assert_zero_on_disk_from(root, written[victim].offset)
    redo = [
        StoreMessage(
            topic=w.msg.topic,
            queue_id=w.msg.queue_id,
            body=bytes(b ^ 0x5A for b in w.msg.body),
            tags=w.msg.tags,
            keys=w.msg.keys,
            properties=w.msg.properties,
        )
        for w in written[victim : victim + 10]
    ]
    rewritten = put_all(store, redo)
    assert [w.end for w in rewritten] == [w.end for w in written[victim : victim + 10]]
    crash(store)

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False
    assert report.commitlog_max_offset == written[victim + 10].offset
    assert_served_exactly(store, written[:victim] + rewritten)
    assert store.look_message(written[victim + 10].offset) is None
    for w in written[victim + 10 :]:
        assert store.query_messages("T", w.msg.keys[0]) == []
    assert store.verify() == []


# --------------------------------------------------------------------------- real kill -9

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from services.store import StoreMessage, MessageStore, PutStatus, StoreConfig

    store = MessageStore(StoreConfig(
        root_dir=Path(sys.argv[1]), mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1000, max_index_num=4000,
        disk_max_used_space_ratio=100, disk_space_clean_forcibly_ratio=100,
        disk_space_warning_level_ratio=100))  # the machine's disk must not clean this store
    store.start()
    for i in range(1_000_000):
        body = (f"kill-{i}|" * 40).encode()
        result = store.put_message(StoreMessage(topic="Kill", queue_id=i % 2, body=body,
                                           keys=[f"k{i}"]))
        if result.status != PutStatus.PUT_OK:
            sys.exit(f"put {i}: {result}")
        sys.stdout.write(f"{i} {result.commitlog_offset} {result.queue_offset}\\n")
        sys.stdout.flush()
""")


def kill_body(i: int) -> bytes:
    return (f"kill-{i}|" * 40).encode()


def test_sigkilled_writer_loses_no_acknowledged_message(tmp_path: Path) -> None:
    root = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + KILL_TIMEOUT_S
    try:
        assert child.stdout is not None
        while len(acked) < KILL_ACKS_WANTED and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acked.append(tuple(map(int, line.split())))  # type: ignore[arg-type]
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=KILL_TIMEOUT_S)
        # Read through the same buffered file: communicate() would skip what it buffered.
        rest = child.stdout.read()
        err = child.stderr.read() if child.stderr is not None else ""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert len(acked) >= KILL_ACKS_WANTED, err
    assert child.returncode == -signal.SIGKILL
    # Lines printed before the kill are acknowledgements too; a torn last line is not.
    for line in rest.splitlines(keepends=True):
        if line.endswith("\n"):
            acked.append(tuple(map(int, line.split())))  # type: ignore[arg-type]
    assert (root / "abort").exists()
    assert acked[-1][1] > SEGMENT_BYTES  # the writer crossed a segment boundary

    store = open_store(root)
    try:
        assert store.recovery is not None and store.recovery.clean is False
        for i, offset, _queue_offset in acked:
            record = store.look_message(offset)
            assert record is not None and bytes(record.body) == kill_body(i)
        for queue_id in range(2):
            served = read_queue(store, "Kill", queue_id)
            bodies = [body for _, _, body in served]
            # Exactly once and in order: queue q holds i = q, q+2, q+4... with no gap.
            expected = [kill_body(i) for i in range(queue_id, 2 * len(bodies), 2)]
            assert bodies == expected
            mine = [(q, o) for i, o, q in acked if i % 2 == queue_id]
            assert [(q, o) for q, o, _ in served[: len(mine)]] == mine
        assert store.verify() == []
    finally:
        store.shutdown()


# --------------------------------------------------------------------------- lock


def test_second_store_on_the_same_root_is_refused(make_store: Callable[..., MessageStore]) -> None:
    from services.store import StoreLocked

    store = make_store()
    written = put_all(store, [message(i) for i in range(5)])
    intruder = MessageStore(small_config(store.root))
    with pytest.raises(StoreLocked):
        intruder.start()
    assert (store.root / "abort").exists()
    more = put_all(store, [message(5)])
    store.wait_dispatched()
    assert_served_exactly(store, written + more)
    store.shutdown()

    successor = make_store()  # free again once the owner shut down
    assert successor.recovery is not None and successor.recovery.clean is True
    assert_served_exactly(successor, written + more)
    assert successor.verify() == []
