"""A raw batch after the broker's checks: what goes to the store, and the answer it makes.

A raw SendRequest (records the producer encoded, of one topic, for one queue) is
framed and its headers checked (:func:`services.broker.send.batch_check.
check_headers`); a record whose header is wrong is refused on its own
(MESSAGE_ILLEGAL with a reason naming its index) and the others go on. This
module holds the steps between those checks and the store: the records to
store (:func:`storable`: the refused ones taken out, or the whole answer when
every record is refused or the batch cannot be framed), and the answer from the
store's results with the refusals put back in their places (:func:`answer`).
The raw send path and the sections of a send (:mod:`services.broker.send.
send_sections`) both go through them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import grpc

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.record import SYS_FLAG_TRANSACTION_MASK, CorruptRecord, InvalidMessage
from boltmq.wire.record_batch import (
    H_BODY_LEN,
    H_SYS_FLAG,
    RAW_HEAD,
    MalformedBatch,
    RecordBatch,
    check_header,
    frame_records,
    select,
)
from boltmq.wire.record_encoding import encode_topic
from boltmq.wire.record_heads import CHECK_COLUMNS_MIN
from services.broker.config import BrokerConfig
from services.broker.delay.delay_message import DELAY_MARKERS
from services.broker.errors import StoreFailed
from services.broker.send.batch_check import check_headers, transaction_refusal
from services.broker.wire import fill_send_response, to_send_response


class CheckedBatch(NamedTuple):
    """A framed raw batch and what its header checks found."""

    batch: RecordBatch
    positions: list[int]
    refused: dict[int, str]
    """Why each refused record is refused, by index."""
    delayed: bool
    """Whether any record's properties may ask for a delay (the per-message path)."""


def checked_batch(
    records: bytes, count: int, topic: str, queue_id: int, config: BrokerConfig
) -> CheckedBatch | broker_pb2.SendResponse:
    """The batch checked header by header; the answer refusing every record when the
    records cannot be framed (they cannot be told apart)."""
    batch = RecordBatch(records, count, topic, queue_id)
    try:
        positions = frame_records(batch.records, batch.count)
    except MalformedBatch as exc:
        refused = dict.fromkeys(range(count), str(exc))
        return merge_refused(
            store_pb2.AppendResponse(), refused, count, topic, queue_id, config.broker_name
        )
    refused, delayed = check_headers(batch, positions, config)
    return CheckedBatch(batch, positions, refused, delayed)


def checked_batches(
    batches: Sequence[RecordBatch], config: BrokerConfig
) -> list[CheckedBatch | None]:
    """:func:`checked_batch` of each of many batches (the sections of a send) in one pass:
    the same refusals with the same reasons, and None for a batch whose records cannot be
    framed (it goes alone: its own raw request refuses every record).

    A small batch's records are checked one by one (:func:`check_header`) and the
    delay names searched for once in every good record's properties, then again in
    each batch's only when found; a batch of :data:`CHECK_COLUMNS_MIN` records or
    more is checked as columns (:func:`checked_batch`)."""
    max_body_bytes = config.max_message_size_bytes
    out: list[CheckedBatch | None] = []
    searched: list[bytes] = []  # each small batch's good records' properties, joined
    for batch in batches:
        records, count = batch.records, batch.count
        if count >= CHECK_COLUMNS_MIN:
            whole = checked_batch(records, count, batch.topic, batch.queue_id, config)
            out.append(whole if isinstance(whole, CheckedBatch) else None)
            searched.append(b"")
            continue
        try:
            positions = frame_records(records, count)
        except MalformedBatch:
            out.append(None)
            searched.append(b"")
            continue
        topic_field, magic = encode_topic(batch.topic)
        skip = RAW_HEAD.size + len(topic_field) + 2
        ends = [*positions[1:], len(records)]
        refused: dict[int, str] = {}
        properties: list[bytes] = []
        for index, (position, end) in enumerate(zip(positions, ends, strict=True)):
            try:
                head = check_header(
                    records, position, end - position, topic_field, magic, max_body_bytes
                )
            except (InvalidMessage, CorruptRecord) as exc:
                refused[index] = f"records[{index}]: {exc}"
                continue
            properties.append(records[position + skip + head[H_BODY_LEN] : end])
            if head[H_SYS_FLAG] & SYS_FLAG_TRANSACTION_MASK:
                refused[index] = transaction_refusal(index)
        out.append(CheckedBatch(batch, positions, refused, False))
        searched.append(b"".join(properties))
    if any(marker in b"\x00".join(searched) for marker in DELAY_MARKERS):
        for n, (checked, joined) in enumerate(zip(out, searched, strict=True)):
            if checked is not None and any(marker in joined for marker in DELAY_MARKERS):
                out[n] = checked._replace(delayed=True)
    return out


def storable(checked: CheckedBatch, broker_name: str) -> RecordBatch | broker_pb2.SendResponse:
    """The records to store (the refused ones taken out); the answer when none is left."""
    batch, refused = checked.batch, checked.refused
    if not refused:
        return batch
    if len(refused) == batch.count:
        return merge_refused(
            store_pb2.AppendResponse(),
            refused,
            batch.count,
            batch.topic,
            batch.queue_id,
            broker_name,
        )
    return select(batch, checked.positions, (i for i in range(batch.count) if i not in refused))


def answer(
    checked: CheckedBatch,
    stored: RecordBatch,
    response: store_pb2.AppendResponse,
    broker_name: str,
) -> broker_pb2.SendResponse:
    """The answer to the batch from the store's results for ``stored`` (StoreFailed when
    the store answered another number of results)."""
    if len(response.statuses) != stored.count:
        raise StoreFailed(
            grpc.StatusCode.INTERNAL,
            f"store answered {len(response.statuses)} results for {stored.count} records",
        )
    batch = checked.batch
    if checked.refused:
        return merge_refused(
            response, checked.refused, batch.count, batch.topic, batch.queue_id, broker_name
        )
    return to_send_response(response, batch.topic, batch.queue_id, broker_name)


def answer_share(
    into: broker_pb2.SendResponse,
    checked: CheckedBatch,
    stored: RecordBatch,
    response: store_pb2.AppendResponse,
    start: int,
    broker_name: str,
) -> None:
    """Fill ``into`` (empty, in place) with the answer to the batch from its share of an
    Append of runs' answer: the ``stored.count`` entries from ``start`` (the store's
    results for ``stored``), the broker's refusals put back in their places."""
    batch = checked.batch
    end = start + stored.count
    if not checked.refused:
        fill_send_response(into, response, start, end, batch.topic, batch.queue_id, broker_name)
        return
    errors = response.errors
    share = store_pb2.AppendResponse(
        statuses=response.statuses[start:end],
        commitlog_offsets=response.commitlog_offsets[start:end],
        queue_offsets=response.queue_offsets[start:end],
        store_timestamp_ms=response.store_timestamp_ms,
        msg_id_prefix=response.msg_id_prefix,
        errors={i - start: e for i, e in errors.items() if start <= i < end},
    )
    into.CopyFrom(
        merge_refused(share, checked.refused, batch.count, batch.topic, batch.queue_id, broker_name)
    )


def merge_refused(
    stored: store_pb2.AppendResponse,
    refused: dict[int, str],
    count: int,
    topic: str,
    queue_id: int,
    broker_name: str,
) -> broker_pb2.SendResponse:
    """The store's results for the records it got, with the broker's refusals put back in
    their places (MESSAGE_ILLEGAL, nothing stored)."""
    statuses, commitlog_offsets, queue_offsets = [], [], []
    errors: dict[int, str] = {}
    stored_index = 0
    for index in range(count):
        if index in refused:
            statuses.append(message_pb2.MESSAGE_ILLEGAL)
            commitlog_offsets.append(-1)
            queue_offsets.append(-1)
            errors[index] = refused[index]
            continue
        statuses.append(stored.statuses[stored_index])
        commitlog_offsets.append(stored.commitlog_offsets[stored_index])
        queue_offsets.append(stored.queue_offsets[stored_index])
        if stored_index in stored.errors:
            errors[index] = stored.errors[stored_index]
        stored_index += 1
    merged = store_pb2.AppendResponse(
        statuses=statuses,
        commitlog_offsets=commitlog_offsets,
        queue_offsets=queue_offsets,
        store_timestamp_ms=stored.store_timestamp_ms,
        msg_id_prefix=stored.msg_id_prefix,
        errors=errors,
    )
    return to_send_response(merged, topic, queue_id, broker_name)
