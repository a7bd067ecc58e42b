"""PulledRecords: the records of a pull, checked (the store) and decoded (a consumer) in bulk.

Both sides read the heads of many records at once
(:func:`boltmq.wire.record_heads.gather_heads`): the store checks the records
a pull serves (:func:`verified_runs`, as :func:`~boltmq.wire.record.verified_record`
checks one) and a consumer decodes a pull's records (:func:`decode_pulled`, as
:func:`~boltmq.wire.record.decode_records` does). In each, what the arrays do
not pass goes to the scalar function, whose error is the refusal; only the
CRCs are computed one record at a time. The record format is
:mod:`boltmq.wire.record`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Final

import numpy as np
import numpy.typing as npt

from boltmq.wire.body_compression import InflatingRecordView, inflating
from boltmq.wire.record import (
    FIXED_OVERHEAD_IPV4,
    HOST_V6_BITS,
    INT,
    MAGIC_MESSAGE,
    MESSAGE_MAGICS,
    SYS_FLAG_COMPRESSED,
    CorruptRecord,
    RecordView,
    crc32,
    decode_records,
    topic_name,
    verified_record,
)
from boltmq.wire.record_batch import RAW_HEAD, uniform_positions
from boltmq.wire.record_heads import SMALL_BATCH, Int64s, gather_heads, gather_rows, tile_bounds

_MAGICS: Final = np.array(sorted(MESSAGE_MAGICS), dtype=np.uint32)


class VerifiedRuns:
    """What :func:`verified_runs` found: good records as views, and why others were refused."""

    __slots__ = ("views", "count", "refused")

    def __init__(self) -> None:
        self.views: list[memoryview] = []
        """One view per run of good records that lie back to back, in order."""
        self.count = 0
        """Good records in ``views``."""
        self.refused: list[CorruptRecord] = []


def verified_runs(
    view: memoryview,
    positions: Sequence[int] | Int64s,
    sizes: Sequence[int] | Int64s,
    *,
    check_crc: bool,
) -> VerifiedRuns:
    """The records at ``positions`` of ``view`` (``sizes`` from the consume queue), each
    checked as :func:`verified_record` checks one, in bulk.

    A record passes when its total size is the consume queue's, its magic a
    message magic, its body within it and (with ``check_crc``) the body's CRC
    right; the heads are checked with numpy, the CRCs one by one. A record the
    vector checks do not pass (an IPv6 host, a damaged head) is checked again
    by :func:`verified_record`, whose CorruptRecord is its refusal. Good records
    that lie back to back come out as one view (what a pull sends on as it is).
    """
    count = len(positions)
    if count < SMALL_BATCH:  # arrays cost more than they save on a few records
        return _verified_few(view, positions, sizes, check_crc=check_crc)
    found = VerifiedRuns()
    starts = np.asarray(positions, dtype=np.int64)
    totals = np.asarray(sizes, dtype=np.int64)
    good, body_lengths, crcs = _vector_checks(view, starts, totals, count)
    refused: dict[int, CorruptRecord] = {}
    if check_crc:
        checked = np.flatnonzero(good)
        bodies = starts[checked] + RAW_HEAD.size
        computed = [
            crc32(view[begin:end]) & 0x7FFFFFFF
            for begin, end in zip(
                bodies.tolist(), (bodies + body_lengths[checked]).tolist(), strict=True
            )
        ]
        for index in checked[np.asarray(computed, dtype=np.int64) != crcs[checked]].tolist():
            good[index] = False
            refused[index] = CorruptRecord(f"body CRC mismatch at {int(starts[index])}")
    for index in np.flatnonzero(~good).tolist():
        if index not in refused:
            try:
                verified_record(view, int(starts[index]), int(totals[index]), check_crc=check_crc)
                good[index] = True
            except CorruptRecord as exc:
                refused[index] = exc
    found.refused = [refused[index] for index in sorted(refused)]
    kept = np.flatnonzero(good)
    found.count = len(kept)
    if found.count:
        run_starts, run_ends = starts[kept], starts[kept] + totals[kept]
        joined = np.zeros(len(kept), dtype=bool)
        joined[1:] = run_starts[1:] == run_ends[:-1]  # back to back with the one before
        found.views = [
            view[begin:end]
            for begin, end in zip(
                run_starts[~joined].tolist(),
                run_ends[np.append(~joined[1:], True)].tolist(),
                strict=True,
            )
        ]
    return found


def _verified_few(
    view: memoryview,
    positions: Sequence[int] | Int64s,
    sizes: Sequence[int] | Int64s,
    *,
    check_crc: bool,
) -> VerifiedRuns:
    """:func:`verified_runs` of fewer than SMALL_BATCH records: each by
    :func:`verified_record`, the runs joined as they come."""
    found = VerifiedRuns()
    begin = end = -1  # the run being joined
    starts = positions.tolist() if isinstance(positions, np.ndarray) else positions
    totals = sizes.tolist() if isinstance(sizes, np.ndarray) else sizes
    for start, total in zip(starts, totals, strict=True):
        try:
            verified_record(view, start, total, check_crc=check_crc)
        except CorruptRecord as exc:
            found.refused.append(exc)
            continue
        found.count += 1
        if start != end:
            if begin >= 0:
                found.views.append(view[begin:end])
            begin = start
        end = start + total
    if begin >= 0:
        found.views.append(view[begin:end])
    return found


def _vector_checks(
    view: memoryview, starts: Int64s, totals: Int64s, count: int
) -> tuple[npt.NDArray[np.bool_], Int64s, Int64s]:
    """Per record: passed the head checks, body length, body CRC field."""
    good = np.zeros(count, dtype=bool)
    lengths = np.zeros(count, dtype=np.int64)
    crcs = np.zeros(count, dtype=np.int64)
    if count < SMALL_BATCH:
        return good, lengths, crcs  # all to verified_record
    data = np.frombuffer(view, dtype=np.uint8)
    readable = (starts >= 0) & (starts + FIXED_OVERHEAD_IPV4 <= len(data))
    inside = np.flatnonzero(readable)
    heads = gather_heads(data, starts[inside])
    body_len = heads["body_length"].astype(np.int64)
    good[inside] = (
        (heads["total_size"] == totals[inside])
        & np.isin(heads["magic"], _MAGICS)
        & (starts[inside] + totals[inside] <= len(data))
        & ((heads["sys_flag"] & HOST_V6_BITS) == 0)
        & (body_len >= 0)
        & (RAW_HEAD.size + body_len + 3 <= totals[inside])
    )
    lengths[inside] = body_len
    crcs[inside] = heads["body_crc"]
    return good, lengths, crcs


def decode_pulled(
    data: bytes | memoryview, *, check_crc: bool = True, inflate: bool = False
) -> list[RecordView]:
    """Every record of a pull's ``records`` (laid back to back), as :func:`decode_records`
    decodes them, with the checks in bulk.

    A pull's records are mostly of one topic with IPv4 hosts; for a run of at
    least SMALL_BATCH such records numpy checks what :func:`decode_records`
    checks one record at a time (magic, host layout, that body, topic and
    properties add up to each total_size, one topic) and only the CRCs and the
    views are made per record. Anything else (a short run, an IPv6 host, a long
    topic, several topics, a damaged record) goes to :func:`decode_records`,
    so a refusal is its CorruptRecord, word for word.

    ``inflate``: compressed bodies are inflated when first read, as
    :func:`~boltmq.wire.body_compression.inflating` makes them (the sys_flags
    read with the heads, not once more per record).
    """
    view = memoryview(data)
    positions = _pulled_positions(view)
    if positions is None or len(positions) < SMALL_BATCH:
        return _one_by_one(view, check_crc, inflate)
    array = np.frombuffer(view, dtype=np.uint8)
    starts, ends = tile_bounds(positions, len(array))
    heads = gather_heads(array, starts)
    body_starts = starts + RAW_HEAD.size
    body_ends = body_starts + heads["body_length"].astype(np.int64)
    if not (
        (heads["magic"] == MAGIC_MESSAGE)
        & ((heads["sys_flag"] & HOST_V6_BITS) == 0)
        & (body_ends >= body_starts)
        & (body_ends + 3 <= ends)
    ).all():
        return _one_by_one(view, check_crc, inflate)
    topic_lengths = array[body_ends].astype(np.int64)
    topic_length = int(topic_lengths[0])
    properties_at = body_ends + 1 + topic_lengths + 2
    if not ((topic_lengths == topic_length).all() and (properties_at <= ends).all()):
        return _one_by_one(view, check_crc, inflate)
    lengths = gather_rows(array, properties_at - 2, 2).astype(np.int64)
    topics = gather_rows(array, body_ends + 1, topic_length)
    if not (
        (properties_at + (lengths[:, 0] << 8) + lengths[:, 1] == ends).all()
        and (topics == topics[0]).all()
    ):
        return _one_by_one(view, check_crc, inflate)
    begins, finishes = body_starts.tolist(), body_ends.tolist()
    if check_crc:
        crcs = [crc32(view[b:e]) & 0x7FFFFFFF for b, e in zip(begins, finishes, strict=True)]
        if crcs != heads["body_crc"].tolist():
            return _one_by_one(view, check_crc, inflate)
    topic = topic_name(topics[0].tobytes())
    records = list(
        map(
            RecordView,
            repeat(view),
            positions,
            begins,
            finishes,
            repeat(topic),
            properties_at.tolist(),
        )
    )
    if inflate:
        for index in np.flatnonzero(heads["sys_flag"] & SYS_FLAG_COMPRESSED).tolist():
            records[index] = InflatingRecordView(records[index])
    return records


def _one_by_one(view: memoryview, check_crc: bool, inflate: bool) -> list[RecordView]:
    """:func:`decode_pulled` for what the bulk checks do not take."""
    records = decode_records(view, check_crc=check_crc)
    return inflating(records) if inflate else records


def _pulled_positions(view: memoryview) -> list[int] | None:
    """Where each record starts when the total_size fields tile ``view``, else None."""
    end = len(view)
    if end < FIXED_OVERHEAD_IPV4:
        return None
    first = INT.unpack_from(view, 0)[0]
    if first >= FIXED_OVERHEAD_IPV4 and end % first == 0:
        uniform = uniform_positions(view, end // first)
        if uniform is not None:
            return uniform
    positions = []
    position = 0
    unpack = INT.unpack_from
    while position + FIXED_OVERHEAD_IPV4 <= end:
        total = unpack(view, position)[0]
        if total < FIXED_OVERHEAD_IPV4:
            return None
        positions.append(position)
        position += total
    return positions if position == end else None
