"""``boltmq store inspect``: summarise a stopped store's directory, and decode records.

Everything is read through :func:`services.store.verify.open_offline`, the same
offline view ``boltmq store verify`` uses, so the two commands never disagree
about where the data ends. A shared ``flock`` on ``<root>/lock`` keeps a
running store (which holds it exclusively) from changing the files under us;
the rejected alternative, reading without the lock, would print offsets that
are stale by the time they are read.

Times are printed in UTC ISO 8601 so that output from different hosts compares.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from boltmq.wire.body_compression import CorruptBody, original_body
from boltmq.wire.record import SYS_FLAG_COMPRESSED, CorruptRecord, RecordView
from services.store.checkpoint import CHECKPOINT_FILE_SIZE, CorruptCheckpoint, decode_checkpoint
from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueueTable
from services.store.verify import offline_lock, open_offline

BODY_PREVIEW_BYTES = 32
"""How much of a body a decoded-record line shows."""


def inspect_directory(directory: Path, records: int, from_offset: int | None) -> Iterator[str]:
    """Lines describing the store at ``directory``, which is not changed.

    Decodes ``records`` CommitLog records (blank end-of-segment markers are
    shown but not counted) starting at ``from_offset`` (default: the first).
    Raises FileNotFoundError when ``directory`` is not a store, RuntimeError
    when a running store holds it and ValueError when ``from_offset`` lies
    outside the CommitLog; all before the first line is produced.
    """
    root = Path(directory)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    if not (root / "commitlog").is_dir():
        raise FileNotFoundError(f"{root} has no commitlog/ directory: not a BoltMQ store")
    with offline_lock(root):
        commitlog, queues, index = open_offline(root, StoreConfig(root_dir=root))
        try:
            start = commitlog.min_offset if from_offset is None else from_offset
            if records and not commitlog.min_offset <= start <= commitlog.max_offset:
                raise ValueError(
                    f"--from-offset {start} is outside the CommitLog "
                    f"[{commitlog.min_offset}, {commitlog.max_offset}]"
                )
            yield f"store {root.resolve()}"
            yield from _commitlog_lines(commitlog)
            yield from _checkpoint_lines(root)
            yield from _abort_lines(root)
            yield from _queue_lines(queues)
            yield from _index_lines(index)
            if records:
                yield from _record_lines(commitlog, start, records)
        finally:
            commitlog.close()
            queues.close()
            index.close()


def _iso(timestamp_ms: int) -> str:
    if timestamp_ms <= 0:
        return "none"
    try:
        moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"invalid ({timestamp_ms} ms)"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _commitlog_lines(commitlog: CommitLog) -> Iterator[str]:
    segments = commitlog.files.files
    yield (
        f"commitlog: {len(segments)} segments of {commitlog.files.file_size} bytes, "
        f"min offset {commitlog.min_offset}, max offset {commitlog.max_offset}"
    )
    for mf in segments:
        yield f"  segment {mf.path.name}: {mf.wrote_position} data bytes"


def _checkpoint_lines(root: Path) -> Iterator[str]:
    path = root / "checkpoint"
    if not path.exists():
        yield "checkpoint: missing"
        return
    with path.open("rb") as f:
        raw = f.read(CHECKPOINT_FILE_SIZE)
    try:
        state = decode_checkpoint(raw)
    except CorruptCheckpoint as exc:
        yield f"checkpoint: corrupt: {exc}"
        return
    yield (
        f"checkpoint: physic {_iso(state.physic_msg_timestamp)}, "
        f"logics {_iso(state.logics_msg_timestamp)}, "
        f"index {_iso(state.index_msg_timestamp)}"
    )


def _abort_lines(root: Path) -> Iterator[str]:
    if (root / "abort").exists():
        yield "abort file: present (the last run did not shut down cleanly)"
    else:
        yield "abort file: absent (clean shutdown)"


def _queue_lines(queues: ConsumeQueueTable) -> Iterator[str]:
    ordered = sorted(queues, key=lambda cq: (cq.topic, cq.queue_id))
    yield f"consume queues: {len(ordered)}"
    for cq in ordered:
        low, high = cq.min_offset(), cq.max_offset()
        yield (
            f"  {cq.topic}/{cq.queue_id}: queue offsets {low}..{high} "
            f"({high - low} entries), {len(cq.files.files)} files"
        )
    for skipped in queues.skipped_torn:
        yield f"  {skipped}"


def _index_lines(index) -> Iterator[str]:
    files = list(index.files)
    yield f"index files: {len(files)}"
    for f in files:
        yield (
            f"  {f.path.name}: time {_iso(f.begin_timestamp)} .. {_iso(f.end_timestamp)}, "
            f"physical offsets {f.begin_phy_offset}..{f.end_phy_offset}, "
            f"index_count {f.index_count}"
        )


def _record_lines(commitlog: CommitLog, start: int, count: int) -> Iterator[str]:
    """One line per record from ``start``; stops after ``count`` messages or a corrupt one."""
    yield f"records from offset {start}:"
    shown = 0
    end = start
    walk = commitlog.walk(start, check_crc=True)
    try:
        for offset, record in walk:
            if record is None:
                mf = commitlog.files.find(offset)
                end = mf.file_end_offset if mf is not None else offset
                yield f"  {offset}: blank (end of segment)"
                continue
            end = offset + record.total_size
            line = _record_line(offset, record)
            del record  # holds a view of the mapping, which must be closable at the end
            yield line
            shown += 1
            if shown >= count:
                return
        yield f"  end of data at {end} ({shown} records shown)"
    except CorruptRecord as exc:
        yield f"  corrupt record: {exc}"
    finally:
        walk.close()


def _record_line(offset: int, record: RecordView) -> str:
    keys = " ".join(record.keys) or "-"
    return (
        f"  {offset}: size {record.total_size}, topic {record.topic}, "
        f"queue {record.queue_id}@{record.queue_offset}, "
        f"stored {_iso(record.store_timestamp)}, tags {record.tags or '-'}, keys {keys}, "
        f"msg id {record.msg_id}, {_body_text(record)}"
    )


def _body_text(record: RecordView) -> str:
    """``body N bytes b'...'``: a compressed body inflated, with its stored size (or why
    it does not inflate)."""
    stored = record.body
    zipped = ""
    try:
        body = original_body(record)
    except CorruptBody as exc:
        return f"body {len(stored)} bytes stored compressed: {exc}"
    if record.sys_flag & SYS_FLAG_COMPRESSED:
        zipped = f" (zlib, {len(stored)} stored)"
    preview = bytes(body[:BODY_PREVIEW_BYTES])
    more = "..." if len(body) > BODY_PREVIEW_BYTES else ""
    return f"body {len(body)} bytes{zipped} {preview!r}{more}"
