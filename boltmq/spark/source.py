"""``format("boltmq")``: topics read through the broker, batch and streaming, and writes.

Planning (offsets, partitions) runs on the driver through the registry and the
broker; each task pulls its queue range itself (:mod:`boltmq.spark.queue_reader`).
Readers keep only options and the schema, so they pickle.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)

from boltmq.spark.catalog import Catalog
from boltmq.spark.options import EARLIEST, LATEST, SourceOptions, sink_options, source_options
from boltmq.spark.queue_reader import QueuePartition, read_partition, split_range
from boltmq.spark.schema import MESSAGE_COLUMNS
from boltmq.spark.sink import BoltMQStreamWriter, BoltMQWriter, refuse_overwrite
from boltmq.spark.stream import BoltMQStreamReader


class BoltMQBatchReader(DataSourceReader):
    """``spark.read.format("boltmq")``: fixed offset ranges, one partition per queue range."""

    def __init__(self, options: SourceOptions, schema: Any) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        with Catalog(options) as catalog:
            ranges = catalog.ranges(catalog.topics())
            starts = catalog.resolve(
                options.starting,
                ranges,
                default=EARLIEST,
                timestamp_ms=options.starting_timestamp_ms,
            )
            ends = catalog.resolve(options.ending, ranges, default=LATEST)
        parts: list[InputPartition] = []
        for queue in ranges:
            start = starts[queue.topic][queue.key]
            end = min(ends[queue.topic][queue.key], queue.max_offset)
            parts += split_range(
                queue.topic,
                queue.broker_name,
                queue.queue_id,
                start,
                end,
                options.max_offsets_per_partition,
            )
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueuePartition)
        return read_partition(self.options, self.schema, partition)


class BoltMQDataSource(DataSource):
    """The ``boltmq`` format (options in docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "boltmq"

    def schema(self) -> str:
        return MESSAGE_COLUMNS

    def reader(self, schema: Any) -> DataSourceReader:
        return BoltMQBatchReader(source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BoltMQStreamReader(source_options(self.options, streaming=True), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        refuse_overwrite(overwrite)
        return BoltMQWriter(sink_options(self.options, schema.fieldNames()))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        refuse_overwrite(overwrite, streaming=True)  # Spark asks for complete mode this way
        return BoltMQStreamWriter(sink_options(self.options, schema.fieldNames()))
