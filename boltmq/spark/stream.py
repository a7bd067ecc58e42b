"""Streaming reads of ``boltmq``: offsets, admission control and Trigger.AvailableNow.

The Spark checkpoint holds the offsets (docs/spark.md): a micro-batch reads exactly
``[start, end)`` of every queue as Spark planned it, so a restarted query reads
from the offsets its checkpoint recorded, with nothing lost or read twice.
Nothing is committed to a consumer group: ``commit()`` is not called reliably
(Spark may stop before it), so broker-side offsets could only ever lag.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from boltmq.spark.catalog import Catalog, Offsets, QueueRange
from boltmq.spark.options import EARLIEST, LATEST, SourceOptions, split_queue_key
from boltmq.spark.queue_reader import QueuePartition, read_partition, split_range


def spread_limit(backlogs: dict[tuple[str, str], int], limit: int) -> dict[tuple[str, str], int]:
    """Offsets each queue may advance so that the total stays within ``limit``.

    Shares follow each queue's backlog (Kafka's maxOffsetsPerTrigger rule),
    rounded down; what rounding leaves over goes to the largest backlogs, so
    a batch always moves when anything is waiting and never exceeds ``limit``.
    """
    total = sum(backlogs.values())
    if total <= limit:
        return dict(backlogs)
    shares = {key: backlog * limit // total for key, backlog in backlogs.items()}
    left = limit - sum(shares.values())
    for key in sorted(backlogs, key=lambda k: (-(backlogs[k] - shares[k]), k)):
        if left <= 0:
            break
        if shares[key] < backlogs[key]:
            shares[key] += 1
            left -= 1
    return shares


class BoltMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("boltmq")`` (see the module docstring)."""

    def __init__(self, options: SourceOptions, schema: Any) -> None:
        self.options = options
        self.schema = schema
        self._target: Offsets | None = None
        """With Trigger.AvailableNow: the ends recorded at start; never read past them."""

    def _ranges(self) -> list[QueueRange]:
        with Catalog(self.options) as catalog:
            return catalog.ranges(catalog.topics())

    def initialOffset(self) -> dict:
        with Catalog(self.options) as catalog:
            ranges = catalog.ranges(catalog.topics())
            default = LATEST if self.options.starting == "latest" else EARLIEST
            return catalog.resolve(
                self.options.starting,
                ranges,
                default=default,
                timestamp_ms=self.options.starting_timestamp_ms,
            )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = _ends(self._ranges())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        ranges = self._ranges()
        ends = self._target if self._target is not None else _ends(ranges)
        firsts_now = {(q.topic, q.key): q.min_offset for q in ranges}
        firsts: dict[tuple[str, str], int] = {}
        backlogs: dict[tuple[str, str], int] = {}
        for topic, queues in ends.items():
            for key, end in queues.items():
                begin = start.get(topic, {}).get(key)
                if begin is None:  # a queue new to this query: from where it begins now
                    begin = min(firsts_now.get((topic, key), 0), end)
                firsts[(topic, key)] = begin
                backlogs[(topic, key)] = max(0, end - begin)
        if isinstance(limit, ReadMaxRows):
            backlogs = spread_limit(backlogs, limit.max_rows)
        latest: Offsets = {topic: dict(queues) for topic, queues in start.items()}
        for (topic, key), advance in backlogs.items():
            if advance > 0 or key not in latest.get(topic, {}):
                latest.setdefault(topic, {})[key] = firsts[(topic, key)] + advance
        return latest

    def reportLatestOffset(self) -> dict | None:
        return _ends(self._ranges())

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        parts: list[InputPartition] = []
        for topic, queues in sorted(end.items()):
            for key, stop in sorted(queues.items()):
                begin = start.get(topic, {}).get(key, EARLIEST)
                if begin == stop:
                    continue
                broker_name, queue_id = split_queue_key(key)
                parts += split_range(
                    topic,
                    broker_name,
                    queue_id,
                    begin,
                    stop,
                    self.options.max_offsets_per_partition,
                )
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueuePartition)
        return read_partition(self.options, self.schema, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint, not the broker, holds this query's offsets."""


def _ends(ranges: list[QueueRange]) -> Offsets:
    ends: Offsets = {}
    for queue in ranges:
        ends.setdefault(queue.topic, {})[queue.key] = queue.max_offset
    return ends
