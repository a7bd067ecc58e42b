"""Reading one queue range through the broker, inside a Spark task.

A :class:`QueuePartition` carries only strings and integers, so it pickles;
the gRPC channel is opened in :func:`read_partition` (on the executor) and
closed when the range is read. Records arrive raw and are decoded by the SDK
(:func:`boltmq.pull_consumer.pull_queue`), then packed into Arrow batches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition

from boltmq.client import ClientInstance
from boltmq.message import MessageQueue
from boltmq.pull_consumer import PullStatus, pull_queue
from boltmq.spark.errors import DataLossError
from boltmq.spark.options import EARLIEST, SourceOptions
from boltmq.spark.schema import BATCH_ROWS_MAX, RowBuffer, arrow_schema

log = logging.getLogger(__name__)

PULL_MESSAGES_MAX = 1024
"""Messages asked for per pull."""
PULL_BYTES_MAX = 4 * 1024 * 1024
"""Record bytes asked for per pull (the store's own default is 256 KiB)."""


class QueuePartition(InputPartition):
    """Offsets ``[start, end)`` of one queue; ``start`` may be EARLIEST (a queue first seen
    by a streaming query: read from wherever the queue begins, no data-loss check)."""

    def __init__(self, topic: str, broker_name: str, queue_id: int, start: int,
                 end: int) -> None:
        super().__init__((topic, broker_name, queue_id, start, end))
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.start = start
        self.end = end


def split_range(topic: str, broker_name: str, queue_id: int, start: int, end: int,
                step: int) -> list[QueuePartition]:
    """One partition per ``step`` offsets of ``[start, end)``; empty when nothing to read."""
    if start == EARLIEST:
        return [QueuePartition(topic, broker_name, queue_id, start, end)] if end > 0 else []
    return [QueuePartition(topic, broker_name, queue_id, low, min(low + step, end))
            for low in range(start, end, step)]


def read_partition(options: SourceOptions, spark_schema: Any,
                   partition: QueuePartition) -> Iterator[Any]:
    """The partition's messages as Arrow record batches (DataLossError per the options)."""
    rows = RowBuffer(arrow_schema(spark_schema), partition.broker_name,
                     include_body=options.include_body)
    queue = MessageQueue(partition.topic, partition.broker_name, partition.queue_id)
    client = ClientInstance(options.registry, rpc_timeout_s=options.rpc_timeout_ms / 1000)
    try:
        offset = partition.start
        check_loss = offset != EARLIEST
        offset = max(offset, 0)
        while offset < partition.end:
            result = pull_queue(client, options.group, queue, offset,
                                max_messages=min(PULL_MESSAGES_MAX, partition.end - offset),
                                subscription=options.subscription, wait_ms=0,
                                max_bytes=PULL_BYTES_MAX)
            if offset < result.min_offset:
                if check_loss:
                    _data_lost(options, queue, offset, result.min_offset)
                offset = result.min_offset
                continue
            if not result.messages and result.status in (PullStatus.NO_NEW_MSG,
                                                         PullStatus.OFFSET_ILLEGAL):
                _shorter(options, queue, partition, offset, result.max_offset)
                break
            if check_loss and options.subscription == "*" and not result.messages and \
                    offset < min(result.next_begin_offset, partition.end):
                # Every entry matches "*": entries passed over without a message point
                # at CommitLog bytes retention removed before the queue's minimum moved.
                _data_lost(options, queue, offset, result.next_begin_offset)
            for message in result.messages:
                if message.queue_offset < partition.end:
                    rows.add(message)
            if len(rows) >= BATCH_ROWS_MAX:
                yield rows.take()
            if result.next_begin_offset <= offset:
                raise DataLossError(f"{queue}: the broker made no progress at offset {offset}")
            offset = result.next_begin_offset
        if len(rows):
            yield rows.take()
    finally:
        client.close()


def _data_lost(options: SourceOptions, queue: MessageQueue, wanted: int, first: int) -> None:
    message = (f"{queue}: offsets {wanted}..{first - 1} are gone (retention removed them; "
               f"the queue now starts at {first})")
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip ahead instead.")
    log.warning("%s; skipping ahead (failOnDataLoss=false)", message)


def _shorter(options: SourceOptions, queue: MessageQueue, partition: QueuePartition,
             offset: int, max_offset: int) -> None:
    """The queue ends before the planned range does: truncated or recreated."""
    message = (f"{queue}: planned to read up to offset {partition.end} but the queue ends at "
               f"{max_offset}")
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to go on.")
    log.warning("%s (failOnDataLoss=false)", message)
