"""Proto conversion: the store's domain objects in their ``boltmq.v1`` wire forms.

A store-level outcome is a value, mapped to its proto enum once, here:
:data:`PUT_STATUS_TO_PROTO` and :data:`GET_STATUS_TO_PROTO` (the numbers are
equal, the mappings make that a checked fact). A batch's append results go
out as packed arrays (:func:`append_response`), a stored record as every
field of a ``MessageExt`` (:func:`message_ext_to_proto`), a pull's outcome as
the head of its answer (:func:`pull_head`) and the store's state as a
``StoreInfo`` (:func:`store_info`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Final

from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    CorruptRecord,
    RecordView,
)
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueue
from services.store.status import GetResult, GetStatus, PutResult, PutStatus, StoredRun
from services.store.store import MessageStore

log = logging.getLogger(__name__)

PUT_STATUS_TO_PROTO: Final[dict[PutStatus, message_pb2.PutMessageStatus.ValueType]] = {
    PutStatus.PUT_OK: message_pb2.PUT_OK,
    PutStatus.FLUSH_DISK_TIMEOUT: message_pb2.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: message_pb2.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: message_pb2.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: message_pb2.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: message_pb2.CREATE_MAPPED_FILE_FAILED,
    PutStatus.MESSAGE_ILLEGAL: message_pb2.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: message_pb2.PROPERTIES_SIZE_EXCEEDED,
    PutStatus.OS_PAGE_CACHE_BUSY: message_pb2.OS_PAGE_CACHE_BUSY,
    PutStatus.UNKNOWN_ERROR: message_pb2.UNKNOWN_ERROR,
}
"""The one mapping from the engine's PutStatus to the wire enum."""
assert set(PUT_STATUS_TO_PROTO) == set(PutStatus)

GET_STATUS_TO_PROTO: Final[dict[GetStatus, message_pb2.GetMessageStatus.ValueType]] = {
    GetStatus.FOUND: message_pb2.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: message_pb2.NO_MATCHED_MESSAGE,
    GetStatus.MESSAGE_WAS_REMOVING: message_pb2.MESSAGE_WAS_REMOVING,
    GetStatus.OFFSET_FOUND_NULL: message_pb2.OFFSET_FOUND_NULL,
    GetStatus.OFFSET_OVERFLOW_BADLY: message_pb2.OFFSET_OVERFLOW_BADLY,
    GetStatus.OFFSET_OVERFLOW_ONE: message_pb2.OFFSET_OVERFLOW_ONE,
    GetStatus.OFFSET_TOO_SMALL: message_pb2.OFFSET_TOO_SMALL,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: message_pb2.NO_MATCHED_LOGIC_QUEUE,
    GetStatus.NO_MESSAGE_IN_QUEUE: message_pb2.NO_MESSAGE_IN_QUEUE,
}
"""The one mapping from the engine's GetStatus to the wire enum."""
assert set(GET_STATUS_TO_PROTO) == set(GetStatus)


def append_response(results: Sequence[PutResult], msg_id_prefix: str) -> store_pb2.AppendResponse:
    """The wire form of a batch's outcome (packed arrays, one entry per message)."""
    return parts_response((results,), msg_id_prefix)


def parts_response(
    parts: Sequence[Sequence[PutResult]], msg_id_prefix: str
) -> store_pb2.AppendResponse:
    """The wire form of the outcomes of several batches appended in one call, one after
    another (an Append of runs): an entry per message in order, ``errors`` indexed over
    all of them. A :class:`StoredRun`'s columns go as they are."""
    to_proto = PUT_STATUS_TO_PROTO
    if len(parts) == 1 and isinstance(parts[0], StoredRun):  # raw records: the columns
        run = parts[0]
        return store_pb2.AppendResponse(
            statuses=[to_proto[run.status]] * len(run),
            commitlog_offsets=run.commitlog_offsets,
            queue_offsets=run.queue_offsets,
            store_timestamp_ms=run.store_timestamp,
            msg_id_prefix=msg_id_prefix,
        )
    statuses: list[message_pb2.PutMessageStatus.ValueType] = []
    commitlog_offsets: list[int] = []
    queue_offsets: list[int] = []
    errors: dict[int, str] = {}
    stored_ts = 0
    for part in parts:
        if isinstance(part, StoredRun):
            statuses += [to_proto[part.status]] * len(part)
            commitlog_offsets += part.commitlog_offsets
            queue_offsets += part.queue_offsets
            stored_ts = max(stored_ts, part.store_timestamp)
            continue
        at = len(statuses)
        for n, result in enumerate(part):
            statuses.append(to_proto[result.status])
            commitlog_offsets.append(result.commitlog_offset)
            queue_offsets.append(result.queue_offset)
            stored_ts = max(stored_ts, result.store_timestamp)
            if result.error:
                errors[at + n] = result.error
    return store_pb2.AppendResponse(
        statuses=statuses,
        commitlog_offsets=commitlog_offsets,
        queue_offsets=queue_offsets,
        store_timestamp_ms=stored_ts,
        msg_id_prefix=msg_id_prefix,
        errors=errors,
    )


def message_ext_to_proto(record: RecordView) -> message_pb2.MessageExt:
    """Every field of a stored record; CorruptRecord if its properties do not decode."""
    properties = record.properties
    keys = properties.get(PROPERTY_KEYS)
    return message_pb2.MessageExt(
        topic=record.topic,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        commitlog_offset=record.commitlog_offset,
        msg_id=record.msg_id,
        body=bytes(record.body),
        tags=properties.get(PROPERTY_TAGS, ""),
        keys=keys.split(KEY_SEPARATOR) if keys else (),
        properties=properties,
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp_ms=record.born_timestamp,
        born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp,
        store_host=record.store_host,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        body_crc=record.body_crc,
    )


def messages_to_proto(records: Iterable[RecordView]) -> list[message_pb2.MessageExt]:
    """Wire forms of ``records``, leaving out (and logging) any that do not decode.

    The body CRC does not cover properties; a record whose properties are
    damaged is skipped like the engine skips one with a bad CRC, rather than
    failing the whole response and stalling the consumer at that offset.
    """
    result = []
    for record in records:
        try:
            result.append(message_ext_to_proto(record))
        except CorruptRecord as exc:
            log.error("refusing to serve record at %d: %s", record.commitlog_offset, exc)
    return result


def pull_head(result: GetResult, *, raw: bool) -> store_pb2.PullResponse:
    """A pull's answer without its messages or records (with their count when ``raw``)."""
    head = store_pb2.PullResponse(
        status=GET_STATUS_TO_PROTO[result.status],
        next_begin_offset=result.next_begin_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
    )
    if raw:
        head.record_count = result.raw_count
    return head


def queue_infos(queues: Iterable[ConsumeQueue]) -> list[store_pb2.QueueInfo]:
    """Each consume queue's offsets, in the order given."""
    return [
        store_pb2.QueueInfo(
            topic=cq.topic,
            queue_id=cq.queue_id,
            min_offset=cq.min_offset(),
            max_offset=cq.max_offset(),
        )
        for cq in queues
    ]


def store_info(store: MessageStore, config: StoreConfig) -> store_pb2.StoreInfo:
    """Offsets, role, epochs, replicas and disk usage of ``store``."""
    commitlog = store.commitlog
    flushed = store.flusher.flushed_offset if store.flusher else commitlog.flushed_offset
    role = store.role
    max_offset = commitlog.max_offset
    return store_pb2.StoreInfo(
        commitlog_min_offset=commitlog.min_offset,
        commitlog_max_offset=max_offset,
        flushed_offset=flushed,
        dispatched_offset=store.dispatcher.reput_offset,
        role="MASTER" if role.is_master else "REPLICA",
        disk_used_percent=store.cleaner.disk_used_percent,
        disk_full=store.cleaner.disk_full,
        store_host=f"{config.store_host}:{config.store_port}",
        epoch=role.epoch,
        epochs=[store_pb2.EpochStart(epoch=e, start_offset=s) for e, s in role.epochs],
        broker_id=role.broker_id,
        segment_bytes=config.mapped_file_size_commitlog,
        broker_role=role.broker_role,
        replicas=_replica_states(store, max_offset),
        appends_wait=store.needs_async_wait,
    )


def _replica_states(store: MessageStore, max_offset: int) -> list[store_pb2.ReplicaState]:
    now_ms = time.time_ns() // 1_000_000
    return [
        store_pb2.ReplicaState(
            replica_address=a.address,
            acked_offset=a.acked_offset,
            lag_bytes=max(0, max_offset - a.acked_offset),
            lag_seconds=0.0
            if a.acked_offset >= max_offset
            else max(0.0, (now_ms - a.caught_up_at_ms) / 1000),
            last_report_ms=a.last_report_ms,
        )
        for a in store.replicas.snapshot()
    ]
