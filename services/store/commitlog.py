"""CommitLog: every message of every topic, appended to memory-mapped segments.

Record layout: see :mod:`boltmq.wire.record`. Segments are named by their
20-digit start offset (:mod:`services.store.mapped_file_queue`). The CommitLog
assigns queue offsets (one counter per topic/queue), physical offsets and the
store timestamp while it holds the append lock, so a record is encoded once,
already final, and copied into the mapping with one slice assignment per
segment touched by a batch.

Each append returns the dispatch requests of its records (what the dispatcher
needs to build consume-queue and index entries) so the hot path never decodes
what it has just encoded; recovery and raw (HA) appends decode from disk.

Three ways in, all under the one append lock:

- :meth:`CommitLog.encode` then :meth:`CommitLog.append`: messages (a
  :class:`~services.store.message.StoreMessage` or a protobuf as it arrived);
- :meth:`CommitLog.check_records` then :meth:`CommitLog.append_records`:
  records a client encoded, copied and patched in place
  (:mod:`services.store.record_copy`); :meth:`CommitLog.append_record_batches`
  takes several such batches (of any topics and queues) under one lock hold,
  with one dispatch hand-off for them all;
- :meth:`CommitLog.append_raw`: a master's bytes on a replica, as they are.

Reading back: :meth:`CommitLog.read_record` and :meth:`CommitLog.read_bytes`
at an offset, :meth:`CommitLog.walk` over every record from one
(:func:`services.store.record_scan.walk_segments`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    HEADS,
    PROPERTY_TAGS,
    SCHEDULE_TOPIC,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_STORE_HOST_V6,
    SYS_FLAG_TRANSACTION_COMMIT,
    SYS_FLAG_TRANSACTION_MASK,
    CorruptRecord,
    InvalidMessage,
    RecordView,
    body_crc,
    scheduled_tags_code,
    tags_code,
)
from boltmq.wire.record_batch import (
    Checked,
    PropertiesTooLarge,
    RecordBatch,
    derive_properties,
    index_keys_of,
)
from boltmq.wire.record_encoding import (
    blank_marker,
    encode_host,
    encode_properties,
    encode_tail,
    encode_topic,
    message_properties,
)
from boltmq.wire.topic import validate_topic
from services.store.chunk_records import chunk_requests
from services.store.config import StoreConfig
from services.store.dispatch_run import DispatchParts, DispatchTuple
from services.store.mapped_file import MappedFile
from services.store.mapped_file_queue import MappedFileQueue
from services.store.message import MessageLike
from services.store.page_cache import PageCacheWindow
from services.store.page_warmer import PageWarmer
from services.store.point_reads import record_at, store_time_at
from services.store.record_copy import (
    RecordsAppend,
    SegmentWrites,
    check_records,
    copy_batch,
    with_delivery_codes,
)
from services.store.record_scan import check_chunk, walk_segments, whole_records_end
from services.store.status import PutResult, PutStatus, StoredRun, create_failed


class DispatchRequest(NamedTuple):
    """What the dispatcher needs of one record."""

    topic: str
    queue_id: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    index_keys: tuple[str, ...]
    sys_flag: int


@dataclass(slots=True)
class AppendBatch:
    """Records appended under one lock: ``[start_offset, end_offset)`` of the CommitLog."""

    start_offset: int
    end_offset: int
    requests: Sequence[DispatchTuple]
    """One per record (a DispatchRun for a bulk append)."""


# A validated message with every part that does not depend on its position:
# (topic, queue_id, flag, sys_flag, born_timestamp, born_host, reconsume_times,
#  prepared_transaction_offset, body, crc, magic, tail, total_size, tags_code,
#  index_keys, consumable). A plain tuple: NamedTuple construction is 5x slower
# and this is built once per message on the hot path.
_Encoded = tuple[
    str,
    int,
    int,
    int,
    int,
    bytes,
    int,
    int,
    bytes,
    int,
    int,
    bytes,
    int,
    int,
    tuple[str, ...],
    bool,
]


def dispatch_request_of(view: RecordView) -> DispatchRequest:
    """The dispatch request of a record decoded from disk (or checked on arrival).

    ``(tags_code, index_keys)`` depend on the properties bytes alone and are
    memoised by :func:`derive_properties`, which saves parsing a dict per
    record when recovery re-dispatches a GiB or a replica takes a chunk.
    """
    code, index_keys = derive_properties(bytes(view.properties_raw))
    if view.topic == SCHEDULE_TOPIC:  # the delivery time, which depends on the record
        code = scheduled_tags_code(view.topic, view.properties, view.store_timestamp, code)
    return DispatchRequest(
        view.topic,
        view.queue_id,
        view.commitlog_offset,
        view.total_size,
        code,
        view.store_timestamp,
        view.queue_offset,
        index_keys,
        view.sys_flag,
    )


def is_consumable(sys_flag: int) -> bool:
    """Prepared and rolled-back transaction records never reach a consume queue."""
    kind = sys_flag & SYS_FLAG_TRANSACTION_MASK
    return kind == 0 or kind == SYS_FLAG_TRANSACTION_COMMIT


class CommitLog:
    """The segments plus the queue-offset counters."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.files = MappedFileQueue(
            config.root_dir / "commitlog", config.mapped_file_size_commitlog
        )
        self.files.preallocate = True
        self.lock = threading.Lock()
        # (topic, queue_id) -> the queue offset the next record gets.
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.store_host = encode_host(config.store_host, config.store_port)
        self._store_v6 = len(self.store_host) == 20
        self._topic_cache: dict[str, tuple[bytes, int]] = {}
        self._host_cache: dict[tuple[str, int], bytes] = {}
        self._tail_cache: dict[tuple[str, str | None], tuple[bytes, int]] = {}
        self._msg_id_prefix = self.store_host.hex().upper()
        self.max_record_size = config.mapped_file_size_commitlog - BLANK_MARKER_SIZE
        # Called under the append lock with each batch, so batches reach the
        # dispatcher in CommitLog order.
        self.on_append: Callable[[AppendBatch], None] | None = None
        self.warmer = PageWarmer(config.warm_mapped_file_ahead_bytes)
        self.page_cache = PageCacheWindow(self.files, config.commitlog_page_cache_window_bytes)

    # ---------------------------------------------------------------- offsets
    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.files.flushed_offset

    @property
    def msg_id_prefix(self) -> str:
        """Store host and port in hex: a message id is this plus the offset (16 hex digits)."""
        return self._msg_id_prefix

    # ---------------------------------------------------------------- encode
    def encode_born_host(self, host: str, port: int) -> bytes:
        """The born host field of ``host:port`` (cached: a few producers send everything)."""
        host_key = (host, port)
        born_host = self._host_cache.get(host_key)
        if born_host is None:
            born_host = encode_host(host, port)
            if len(self._host_cache) < 10_000:
                self._host_cache[host_key] = born_host
        return born_host

    def encode(self, msg: MessageLike, now_ms: int, born_host: bytes | None = None) -> _Encoded:
        """Validate ``msg`` and encode its position-independent parts.

        ``msg`` is a :class:`StoreMessage` or anything with its attributes (the
        store service passes protobuf messages as they arrived, with
        ``born_host`` encoded once per batch instead of per message).
        Raises InvalidMessage (MESSAGE_ILLEGAL) or a PropertiesTooLarge
        (PROPERTIES_SIZE_EXCEEDED) without touching the CommitLog.
        """
        topic = msg.topic
        cached = self._topic_cache.get(topic)
        if cached is None:
            validate_topic(topic)
            cached = encode_topic(topic)
            if len(self._topic_cache) < 100_000:
                self._topic_cache[topic] = cached
        topic_field, magic = cached
        body = msg.body
        if not isinstance(body, bytes | bytearray | memoryview):
            raise InvalidMessage("body must be bytes")
        if len(body) > self.config.max_message_size_bytes:
            raise InvalidMessage(
                f"body is {len(body)} bytes, at most {self.config.max_message_size_bytes}"
            )
        queue_id = msg.queue_id
        if not (type(queue_id) is int and 0 <= queue_id <= self.config.max_queue_id):
            raise InvalidMessage(f"queue_id {queue_id!r} must be 0..{self.config.max_queue_id}")
        tags = msg.tags
        if msg.keys or msg.properties:
            props = message_properties(tags, msg.keys, msg.properties)
            tail = encode_tail_checked(topic_field, encode_properties(props))
            tag = props.get(PROPERTY_TAGS)
            code = scheduled_tags_code(topic, props, now_ms, tags_code(tag) if tag else 0)
            index_keys = index_keys_of(props)
        else:
            # Fast path: only tags (or nothing). The tail depends on (topic, tags) alone.
            cached_tail = self._tail_cache.get((topic, tags))
            if cached_tail is None:
                props = message_properties(tags, None, None)
                cached_tail = (
                    encode_tail_checked(topic_field, encode_properties(props)),
                    tags_code(tags),
                )
                if len(self._tail_cache) < 100_000:
                    self._tail_cache[(topic, tags)] = cached_tail
            tail, code = cached_tail
            index_keys = ()
        if born_host is None:  # a StoreMessage carries its own born host
            born_host = self.encode_born_host(
                getattr(msg, "born_host", "127.0.0.1"), getattr(msg, "born_port", 0)
            )
        sys_flag = msg.sys_flag & ~(SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6)
        if len(born_host) == 20:
            sys_flag |= SYS_FLAG_BORN_HOST_V6
        if self._store_v6:
            sys_flag |= SYS_FLAG_STORE_HOST_V6
        head = HEADS[(len(born_host) == 20, self._store_v6)]
        total = head.size + len(body) + len(tail)
        if total > self.max_record_size:
            raise InvalidMessage(f"record of {total} bytes does not fit in a segment")
        return (
            topic,
            queue_id,
            msg.flag,
            sys_flag,
            msg.born_timestamp or now_ms,
            born_host,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
            body if type(body) is bytes else bytes(body),
            body_crc(body),
            magic,
            tail,
            total,
            code,
            index_keys,
            sys_flag & SYS_FLAG_TRANSACTION_MASK in (0, SYS_FLAG_TRANSACTION_COMMIT),
        )

    # ---------------------------------------------------------------- append
    def append(
        self, encoded: Sequence[_Encoded], now_ms: int
    ) -> tuple[list[PutResult], AppendBatch]:
        """Append records in order under one lock; one slice copy per segment touched."""
        results: list[PutResult] = []
        requests: list[DispatchTuple] = []
        store_host = self.store_host
        id_prefix = self._msg_id_prefix
        head_struct = HEADS[(False, len(store_host) == 20)]
        head_struct_v6 = HEADS[(True, len(store_host) == 20)]
        with self.lock:
            start_offset = self.files.max_offset
            try:
                mf = self.files.last_file_or_create(start_offset)
            except OSError as exc:
                return create_failed(len(encoded), exc), AppendBatch(start_offset, start_offset, [])
            chunk: list[bytes] = []
            chunk_start = mf.wrote_position
            position = chunk_start
            queue_offsets = self.queue_offsets
            for (
                topic,
                queue_id,
                flag,
                sys_flag,
                born_ts,
                born_host,
                reconsume,
                prepared,
                body,
                crc,
                magic,
                tail,
                total,
                code,
                index_keys,
                consumable,
            ) in encoded:
                if total + BLANK_MARKER_SIZE > mf.file_size - position:
                    remaining = mf.file_size - position
                    chunk.append(blank_marker(remaining))
                    self._write_chunk(mf, chunk, chunk_start, now_ms)
                    mf.wrote_position = mf.committed_position = mf.file_size  # segment full
                    try:
                        mf = self.files.last_file_or_create()
                    except OSError as exc:
                        # Disk full or unwritable: what is written stays; the rest fails.
                        results += create_failed(len(encoded) - len(results), exc)
                        chunk = []
                        break
                    chunk = []
                    chunk_start = position = mf.wrote_position
                physical = mf.file_from_offset + position
                if consumable:
                    key = (topic, queue_id)
                    queue_offset = queue_offsets.get(key, 0)
                    queue_offsets[key] = queue_offset + 1
                else:
                    queue_offset = 0
                chunk += (
                    (head_struct_v6 if len(born_host) == 20 else head_struct).pack(
                        total,
                        magic,
                        crc,
                        queue_id,
                        flag,
                        queue_offset,
                        physical,
                        sys_flag,
                        born_ts,
                        born_host,
                        now_ms,
                        store_host,
                        reconsume,
                        prepared,
                        len(body),
                    ),
                    body,
                    tail,
                )
                position += total
                results.append(
                    PutResult(
                        PutStatus.PUT_OK,
                        f"{id_prefix}{physical:016X}",
                        physical,
                        queue_offset,
                        total,
                        now_ms,
                    )
                )
                # A DispatchRequest as a plain tuple (same fields, same order).
                requests.append(
                    (
                        topic,
                        queue_id,
                        physical,
                        total,
                        code,
                        now_ms,
                        queue_offset,
                        index_keys,
                        sys_flag,
                    )
                )
            self._write_chunk(mf, chunk, chunk_start, now_ms)
            batch = self._appended(mf, start_offset, requests)
        return results, batch

    # ---------------------------------------------------------------- client-encoded records
    def check_records(self, batch: RecordBatch) -> tuple[Sequence[Checked], dict[int, PutResult]]:
        """Verify a client-encoded batch (:func:`services.store.record_copy.check_records`):
        the records to append, and a result for each refused one. Nothing is written."""
        return check_records(batch, self.config, self.max_record_size)

    def append_records(
        self,
        records: bytes,
        checked: Sequence[Checked],
        topic: str,
        queue_id: int,
        born_host: bytes,
        now_ms: int,
    ) -> tuple[Sequence[PutResult], AppendBatch]:
        """Append checked client-encoded records in order under one lock (see check_records),
        never decoded: copied and patched, or stamped (:mod:`services.store.record_copy`)."""
        results, batch = self.append_record_batches(
            ((records, checked, topic, queue_id, born_host),), now_ms
        )
        return results[0], batch

    def append_record_batches(
        self, batches: Sequence[RecordsAppend], now_ms: int
    ) -> tuple[list[Sequence[PutResult]], AppendBatch]:
        """Several checked batches appended in order under one lock: a result list per
        batch, one AppendBatch for them all (one dispatch hand-off), and one write a
        segment of the records not stamped in bulk (:class:`SegmentWrites`). Each batch
        gets exactly what its own :meth:`append_records` would: queue offsets continue
        per (topic, queue) in batch order, and a batch that finds the segment full (its
        next one could not be created) fails on its own."""
        if any(topic == SCHEDULE_TOPIC for _, _, topic, _, _ in batches):
            batches = [  # tag code = delivery time, known only now
                (r, with_delivery_codes(r, c, now_ms) if t == SCHEDULE_TOPIC else c, t, q, h)
                for r, c, t, q, h in batches
            ]
        results: list[Sequence[PutResult]] = []
        parts: list[Sequence[DispatchTuple]] = []
        files, queue_offsets, store_host = self.files, self.queue_offsets, self.store_host
        with self.lock:
            start_offset = files.max_offset
            writes: SegmentWrites | None = None
            for records, checked, topic, queue_id, born_host in batches:
                if writes is None or writes.room() <= 0:
                    try:
                        mf = files.last_file_or_create(files.max_offset)
                    except OSError as exc:
                        results.append(create_failed(len(checked), exc))
                        continue
                    writes = writes or SegmentWrites(files, mf, store_host, now_ms)
                    writes.move_to(mf)  # the segment it wrote to is full, if it wrote
                run = StoredRun(self._msg_id_prefix, now_ms)
                key = (topic, queue_id)
                fixed = (queue_id, born_host, store_host, now_ms)
                failed = copy_batch(writes, records, checked, key, fixed, queue_offsets, run, parts)
                results.append([*run, *failed] if failed else run)
            if writes is None:
                return results, AppendBatch(start_offset, start_offset, [])
            writes.write()
            requests = parts[0] if len(parts) == 1 else DispatchParts(parts)
            batch = self._appended(writes.mf, start_offset, requests)
        return results, batch

    def _appended(
        self, mf: MappedFile, start_offset: int, requests: Sequence[DispatchTuple]
    ) -> AppendBatch:
        """After an append (under the lock): warm pages ahead, hand the batch to dispatch."""
        warmer = self.warmer
        if warmer.enabled:
            warmer.follow(mf)
            warmer.nudge(mf.wrote_position)
        batch = AppendBatch(start_offset, self.files.max_offset, requests)
        if self.on_append is not None:
            self.on_append(batch)
        return batch

    @staticmethod
    def _write_chunk(mf: MappedFile, chunk: list[bytes], chunk_start: int, now_ms: int) -> None:
        if chunk:
            data = b"".join(chunk)
            mf.write_at(chunk_start, data)
            mf.wrote_position = mf.committed_position = chunk_start + len(data)
            mf.store_timestamp = now_ms

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append already-encoded CommitLog bytes at ``offset`` (HA replica side).

        ``offset`` must equal the current max offset (or, on an empty
        CommitLog, be a segment start: a replica may begin at the master's
        last segment) and ``data`` must be whole, valid records that do not
        cross a segment (:func:`check_chunk`); nothing is written otherwise.
        Returns the new max offset.
        """
        segment_bytes = self.files.file_size
        # Checked once: the same pass gives the dispatcher its requests, so a
        # replica never reads its own appends back (it would decode each twice).
        # Most chunks are checked all at once (chunk_requests); the rest, and
        # every refusal, record by record.
        requests: list[DispatchTuple] | None = chunk_requests(data, offset, segment_bytes)
        if requests is None:
            requests = [dispatch_request_of(r) for r in check_chunk(data, offset, segment_bytes)]
        with self.lock:
            if self.files.files:
                if offset != self.files.max_offset:
                    raise ValueError(
                        f"raw append at {offset}, but the CommitLog ends at {self.files.max_offset}"
                    )
            elif offset % segment_bytes:
                raise ValueError(
                    f"raw append at {offset} on an empty CommitLog must start a "
                    f"segment (a multiple of {segment_bytes})"
                )
            mf = self.files.last_file_or_create(offset)
            position = offset - mf.file_from_offset
            mf.write_at(position, data)
            mf.wrote_position = mf.committed_position = position + len(data)
            mf.store_timestamp = int(time.time() * 1000)
            return self._appended(mf, offset, requests).end_offset

    def is_record_start(self, offset: int) -> bool:
        """Whether a record (or the CommitLog's end, or a segment start) begins at ``offset``."""
        if offset == self.max_offset or offset % self.files.file_size == 0:
            return self.min_offset <= offset <= self.max_offset
        if not self.min_offset <= offset < self.max_offset:
            return False
        try:
            record = self.read_record(offset, check_crc=False)
        except CorruptRecord:
            return False
        return record is not None and record.commitlog_offset == offset

    # ---------------------------------------------------------------- read
    def read_record(self, offset: int, *, check_crc: bool = True) -> RecordView | None:
        """The record at ``offset``; None when outside the CommitLog; CorruptRecord if bad."""
        mf = self.files.find(offset)
        if mf is None or offset - mf.file_from_offset >= mf.wrote_position or not mf.hold():
            return None
        try:
            return record_at(mf, offset - mf.file_from_offset, check_crc=check_crc)
        finally:
            mf.release()

    def store_time_of(self, offset: int, size: int) -> int | None:
        """Store timestamp of the record at ``offset``; None when it is gone."""
        mf = self.files.find(offset)
        if mf is None or not mf.hold():
            return None
        try:
            return store_time_at(mf, offset - mf.file_from_offset)
        finally:
            mf.release()

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from ``offset``, about ``max_bytes`` of them, within one segment.

        At least one record when one is there, however large; ``b""`` at the
        end of the written data (or of a record still being written).
        """
        mf = self.files.find(offset)
        if mf is None or not mf.hold():
            return b""
        try:
            position = offset - mf.file_from_offset
            end = whole_records_end(mf.view, position, mf.committed_position, max_bytes)
            return bytes(mf.view[position:end]) if end > position else b""
        finally:
            mf.release()

    # ---------------------------------------------------------------- walking
    def walk(
        self, start_offset: int, *, check_crc: bool
    ) -> Generator[tuple[int, RecordView | None], None, None]:
        """Yield ``(offset, record)`` from ``start_offset`` to the end of valid data
        (:func:`services.store.record_scan.walk_segments`: a blank marker yields
        ``(offset, None)``; CorruptRecord at the first invalid record)."""
        return walk_segments(self.files, start_offset, check_crc=check_crc)

    def close(self) -> None:
        self.warmer.stop()
        self.files.close()


def encode_tail_checked(topic_field: bytes, properties_raw: bytes) -> bytes:
    try:
        return encode_tail(topic_field, properties_raw)
    except InvalidMessage as exc:
        raise PropertiesTooLarge(str(exc)) from None
