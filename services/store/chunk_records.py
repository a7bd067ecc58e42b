"""ChunkRecords: a replicated chunk checked and turned into dispatch requests at once.

A replica store takes the master's CommitLog in chunks of thousands of whole
records (:mod:`services.store.record_scan`). Record by record, the check of
:func:`~services.store.record_scan.check_chunk` and then building each dispatch
request cost ~5 us per 1 KiB record, most of the replica store's CPU during a
catch-up. Here:

- the records are framed by one walk over their ``total_size`` fields (they
  lie back to back, so nothing else can find the next one);
- numpy gathers the 88-byte heads (``RAW_HEAD``, IPv4 hosts, big-endian) into
  one structured array and checks every record's framing at once: magic,
  lengths that add up to ``total_size``, ``physical_offset`` equal to where the
  record lands;
- the body CRCs are one ``crc32`` call per record (there is no vector CRC);
- each record's tail (topic length, topic, properties length, properties)
  is looked up in a memo of tails already validated: most records of a
  stream repeat a handful of tails (same topic, same tags, no keys), so the
  topic is decoded and the properties parsed once per distinct tail.

Whatever the fast path does not handle (IPv6 hosts, long topics, the
SCHEDULE_TOPIC_XXXX whose tag code depends on the record, a chunk of few
records) and any chunk that fails a vector check gets None here: the caller
runs the scalar :func:`~services.store.record_scan.check_chunk`, so a
refusal names exactly what it names; the vector checks can only send a chunk
there, never accept one it would refuse.

A request is the dispatcher's plain tuple ``(topic, queue_id,
commitlog_offset, size, tags_code, store_timestamp, queue_offset,
index_keys, sys_flag)`` (``DispatchTuple`` in :mod:`services.store.dispatch_run`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    FIXED_OVERHEAD_IPV4,
    HOST_V6_BITS,
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    MESSAGE_MAGICS,
    SCHEDULE_TOPIC,
    SHORT,
    TOTAL_AND_MAGIC,
    CorruptRecord,
    crc32,
    topic_name,
)
from boltmq.wire.record_batch import RAW_HEAD, derive_properties
from boltmq.wire.record_heads import gather_heads

SMALL_CHUNK: Final = 16
"""Below this many records the scalar check runs: numpy's fixed cost per chunk is more."""
TAILS_MAX: Final = 4096
"""Distinct validated tails remembered (keyless ones only, as derive_properties does)."""
_TOPIC_LENGTH_BYTES: Final = 1
_CRC_MASK: Final = 0x7FFFFFFF
_SCHEDULE_TOPIC_FIELD: Final = bytes([len(SCHEDULE_TOPIC)]) + SCHEDULE_TOPIC.encode()

Request = tuple[str, int, int, int, int, int, int, tuple[str, ...], int]
"""One record's dispatch request (the fields of commitlog.DispatchRequest, in order)."""
Tail = tuple[str, int, tuple[str, ...]]
"""(topic, tags code, index keys) of one validated tail."""
_tails: dict[bytes, Tail] = {}


class _SlowPath(Exception):
    """The chunk holds something the vector path does not handle: use the scalar check."""


def chunk_requests(
    data: bytes | memoryview, offset: int, segment_bytes: int
) -> list[Request] | None:
    """The dispatch requests of a chunk that would be written at CommitLog ``offset``.

    A list only when every record passes what :func:`check_chunk` checks;
    None when the chunk needs the scalar check (it may still be good).
    """
    view = memoryview(data)
    try:
        starts, ends = _frame(view, offset, segment_bytes)
        if len(starts) < SMALL_CHUNK:
            return None
        return _vector_requests(view, offset, starts, ends)
    except _SlowPath:
        return None


def _frame(view: memoryview, offset: int, segment_bytes: int) -> tuple[list[int], list[int]]:
    """Start and end of every message record (a blank marker must end chunk and segment)."""
    size = len(view)
    if offset % segment_bytes + size > segment_bytes:
        raise _SlowPath
    unpack = TOTAL_AND_MAGIC.unpack_from
    starts: list[int] = []
    ends: list[int] = []
    position = 0
    while position + BLANK_MARKER_SIZE <= size:
        total, magic = unpack(view, position)
        if magic not in MESSAGE_MAGICS:
            if (
                magic == MAGIC_BLANK
                and position + total == size
                and (offset + size) % segment_bytes == 0
            ):
                return starts, ends
            raise _SlowPath
        if total < FIXED_OVERHEAD_IPV4 or position + total > size:
            raise _SlowPath
        starts.append(position)
        position += total
        ends.append(position)
    if position != size:
        raise _SlowPath
    return starts, ends


def _vector_requests(
    view: memoryview, offset: int, start_list: list[int], end_list: list[int]
) -> list[Request]:
    data = np.frombuffer(view, dtype=np.uint8)
    starts = np.asarray(start_list, dtype=np.int64)
    ends = np.asarray(end_list, dtype=np.int64)
    heads = gather_heads(data, starts)
    totals = ends - starts
    body_len = heads["body_length"].astype(np.int64)
    topic_at = starts + RAW_HEAD.size + body_len
    ok = (
        (heads["magic"] == MAGIC_MESSAGE)
        & ((heads["sys_flag"] & HOST_V6_BITS) == 0)
        & (totals >= RAW_HEAD.size + 3)
        & (body_len >= 0)
        & (topic_at + 3 <= ends)
        & (heads["commitlog_offset"] == starts + offset)
    )
    if not ok.all():
        raise _SlowPath
    topic_len = data[topic_at].astype(np.int64)
    properties_len_at = topic_at + _TOPIC_LENGTH_BYTES + topic_len
    if not (properties_len_at + 2 <= ends).all():
        raise _SlowPath
    length_bytes = data[properties_len_at[:, None] + np.arange(2)].astype(np.int64)
    if not (properties_len_at + 2 + length_bytes[:, 0] * 256 + length_bytes[:, 1] == ends).all():
        raise _SlowPath
    body_starts = (starts + RAW_HEAD.size).tolist()
    body_ends = topic_at.tolist()
    crcs = np.fromiter(
        (crc32(view[a:b]) for a, b in zip(body_starts, body_ends, strict=True)),
        dtype=np.int64,
        count=len(body_starts),
    )
    if not ((crcs & _CRC_MASK) == heads["body_crc"]).all():
        raise _SlowPath
    tails = [_tail(bytes(view[a:b])) for a, b in zip(body_ends, end_list, strict=True)]
    topics, codes, index_keys = zip(*tails, strict=True)
    return list(
        zip(
            topics,
            heads["queue_id"].tolist(),
            (starts + offset).tolist(),
            totals.tolist(),
            codes,
            heads["store_timestamp"].tolist(),
            heads["queue_offset"].tolist(),
            index_keys,
            heads["sys_flag"].tolist(),
            strict=True,
        )
    )


def _tail(raw: bytes) -> Tail:
    """Topic, tags code and index keys of a record's tail; _SlowPath when it is not plain."""
    known = _tails.get(raw)
    if known is not None:
        return known
    if raw.startswith(_SCHEDULE_TOPIC_FIELD):
        raise _SlowPath  # its tag code is the delivery time, which depends on the record
    topic_end = _TOPIC_LENGTH_BYTES + raw[0]
    try:
        topic = topic_name(raw[_TOPIC_LENGTH_BYTES:topic_end])
        code, index_keys = derive_properties(raw[topic_end + SHORT.size :])
    except CorruptRecord:
        raise _SlowPath from None
    tail = (topic, code, index_keys)
    if not index_keys and len(_tails) < TAILS_MAX:
        _tails[raw] = tail
    return tail
