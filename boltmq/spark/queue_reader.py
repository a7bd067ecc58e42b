"""Reading one queue range through the broker, inside a Spark task.

A :class:`QueuePartition` carries only strings and integers, so it pickles;
the gRPC channel is opened in :func:`read_partition` (on the executor) and
closed when the range is read. Records arrive raw (``records`` of a
PullMessage answer, up to :data:`PULL_MESSAGES_MAX` per call) and go to Arrow
in bulk (:mod:`boltmq.spark.record_columns`); a pull holding anything unusual
is decoded record by record by the SDK's decoder, which also names damage.

The pull itself is made here rather than through
:func:`boltmq.pull_consumer.pull_queue`, which always decodes every record into
objects (~6 us per row more than this path needs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from boltmq.client import ClientInstance, rpc_error_text
from boltmq.kernel.allocator import settle_garbage_collector_once
from boltmq.message import MessageQueue
from boltmq.pull_consumer import PullError, decode_records
from boltmq.spark.errors import DataLossError
from boltmq.spark.options import EARLIEST, SourceOptions
from boltmq.spark.record_columns import RecordBlock, record_starts
from boltmq.spark.schema import RowBuffer, arrow_schema
from boltmq.v1 import broker_pb2, message_pb2

log = logging.getLogger(__name__)

PULL_MESSAGES_MAX = 4096
"""Messages asked for per pull (one Arrow batch each)."""
PULL_BYTES_MAX = 8 * 1024 * 1024
"""Record bytes asked for per pull (the store's own default is 256 KiB)."""
QUEUE_ENDED = frozenset(
    (
        message_pb2.OFFSET_OVERFLOW_ONE,
        message_pb2.NO_MESSAGE_IN_QUEUE,
        message_pb2.NO_MATCHED_LOGIC_QUEUE,
        message_pb2.OFFSET_OVERFLOW_BADLY,
        message_pb2.OFFSET_TOO_SMALL,
    )
)
"""Pull statuses that mean the queue holds nothing at or after the offset asked for
(the SDK's NO_NEW_MSG and OFFSET_ILLEGAL)."""


class QueuePartition(InputPartition):
    """Offsets ``[start, end)`` of one queue; ``start`` may be EARLIEST (a queue first seen
    by a streaming query: read from wherever the queue begins, no data-loss check)."""

    def __init__(self, topic: str, broker_name: str, queue_id: int, start: int, end: int) -> None:
        super().__init__((topic, broker_name, queue_id, start, end))
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.start = start
        self.end = end


def split_range(
    topic: str, broker_name: str, queue_id: int, start: int, end: int, step: int
) -> list[QueuePartition]:
    """One partition per ``step`` offsets of ``[start, end)``; empty when nothing to read."""
    if start == EARLIEST:
        return [QueuePartition(topic, broker_name, queue_id, start, end)] if end > 0 else []
    return [
        QueuePartition(topic, broker_name, queue_id, low, min(low + step, end))
        for low in range(start, end, step)
    ]


def read_partition(
    options: SourceOptions, spark_schema: Any, partition: QueuePartition
) -> Iterator[Any]:
    """The partition's messages as Arrow record batches (DataLossError per the options)."""
    settle_garbage_collector_once()  # a Spark worker's heap (boltmq/kernel/allocator.py)
    schema = arrow_schema(spark_schema)
    queue = MessageQueue(partition.topic, partition.broker_name, partition.queue_id)
    client = options.security.client(options.registry, options.rpc_timeout_ms / 1000)
    try:
        offset = partition.start
        check_loss = offset != EARLIEST
        offset = max(offset, 0)
        while offset < partition.end:
            result = _pull(
                client, options, queue, offset, min(PULL_MESSAGES_MAX, partition.end - offset)
            )
            if offset < result.min_offset:
                if check_loss:
                    _data_lost(options, queue, offset, result.min_offset)
                offset = result.min_offset
                continue
            records = result.records
            if not records and result.status in QUEUE_ENDED:
                _shorter(options, queue, partition, offset, result.max_offset)
                break
            if (
                check_loss
                and options.subscription == "*"
                and not records
                and offset < min(result.next_begin_offset, partition.end)
            ):
                # Every entry matches "*": entries passed over without a message point
                # at CommitLog bytes retention removed before the queue's minimum moved.
                _data_lost(options, queue, offset, result.next_begin_offset)
            if records:
                batch = _batch(records, schema, partition, options.include_body)
                if batch.num_rows:
                    yield batch
            if result.next_begin_offset <= offset:
                raise DataLossError(f"{queue}: the broker made no progress at offset {offset}")
            offset = result.next_begin_offset
    finally:
        client.close()


def _pull(
    client: ClientInstance, options: SourceOptions, queue: MessageQueue, offset: int, count: int
) -> Any:
    """One PullMessage call for raw records (a ``store_pb2.PullResponse``)."""
    request = broker_pb2.BrokerPullRequest(
        consumer_group=options.group,
        topic=queue.topic,
        queue_id=queue.queue_id,
        queue_offset=offset,
        max_messages=count,
        max_bytes=PULL_BYTES_MAX,
        subscription=options.subscription,
        suspend_timeout_ms=0,
        raw_records=True,
    )
    address = client.read_address_of(queue)
    try:
        response = client.broker(address).PullMessage(request, timeout=client.rpc_timeout_s)
    except grpc.RpcError as exc:
        raise PullError(f"pull {queue} failed: {rpc_error_text(exc)}", exc.code()) from None
    if response.suggest_broker_id:  # far behind: the master asks us to read elsewhere
        client.read_from_replica(queue.broker_name)
    return response


def _batch(
    records: bytes, schema: pa.Schema, partition: QueuePartition, include_body: bool
) -> pa.RecordBatch:
    """A pull's records below the partition's end, in bulk when they are plain."""
    starts, stop = record_starts(records, 0, len(records), len(records))
    block = RecordBlock(np.frombuffer(records, dtype=np.uint8), starts)
    if stop == len(records) and block.plain:
        keep = block.heads["queue_offset"] < partition.end
        if not keep.all():
            block = block.take(keep)
        if not block.crc_bad().any():
            return block.to_batch(schema, partition.broker_name, include_body=include_body)
    # Unusual or damaged: the SDK's decoder (CorruptRecord names the damage).
    rows = RowBuffer(schema, partition.broker_name, include_body=include_body)
    rows.add_all(m for m in decode_records(records) if m.queue_offset < partition.end)
    return rows.take()


def _data_lost(options: SourceOptions, queue: MessageQueue, wanted: int, first: int) -> None:
    message = (
        f"{queue}: offsets {wanted}..{first - 1} are gone (retention removed them; "
        f"the queue now starts at {first})"
    )
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip ahead instead.")
    log.warning("%s; skipping ahead (failOnDataLoss=false)", message)


def _shorter(
    options: SourceOptions,
    queue: MessageQueue,
    partition: QueuePartition,
    offset: int,
    max_offset: int,
) -> None:
    """The queue ends before the planned range does: truncated or recreated."""
    message = (
        f"{queue}: planned to read up to offset {partition.end} but the queue ends at {max_offset}"
    )
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to go on.")
    log.warning("%s (failOnDataLoss=false)", message)
