"""Streaming job: events of a topic, aggregated per key and tag over event-time windows.

    python -m pipelines.window_aggregates --registry 127.0.0.1:9876 \\
        --input Events --output EventWindows --checkpoint /tmp/chk --window 1m \\
        --watermark 30s --available-now

Reads ``--input`` with ``format("boltmq")`` (events as :mod:`pipelines.events`
describes), groups them by ``window(event_time, --window, --slide)``, key and
tag behind a ``--watermark``, and writes one message per window to ``--output``
with the boltmq sink:

| part        | holds                                                                   |
|-------------|-------------------------------------------------------------------------|
| ``tags``    | the events' tag (none when the events had none)                         |
| ``keys``    | ``[key]``, also the sharding key: one key's windows, one queue, in order |
| body (JSON) | ``key``, ``tag``, ``window_start_ms``, ``window_end_ms`` (ms since the  |
|             | epoch), ``count``, ``sum``, ``min``, ``max``                            |

``count`` counts events; ``sum``/``min``/``max`` are over their values (null
when none had a value).

A window is written once, final, when the watermark (the largest event time
seen, minus ``--watermark``) passes its end; events older than the watermark
are dropped as late (Spark's append output mode). Update mode, which would
re-send a window's running totals, is not offered: Spark accepts only append
from a Python streaming sink (``boltmq does not support Update mode``), and a
topic is an append-only log anyway.

The Spark checkpoint (``--checkpoint``) holds the topic offsets and the window
state: a restarted job resumes where it stopped. The sink is at-least-once (a
re-run micro-batch sends its windows again; the window bounds, key and tag in a
body identify a window). ``--available-now`` reads what the topic holds at
start, emits what the watermark closes, and stops.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pipelines.durations import Duration, duration_arg, positive_int_arg
from pipelines.failure import report_failure
from pipelines.session import DEFAULT_MASTER, spark_session

EVENT_SCHEMA: Final = "event_time_ms long, value double"
"""The JSON body of an event (pipelines/events.py); other fields are ignored."""


@dataclass(frozen=True)
class WindowJob:
    """Everything the job needs, checked before Spark starts."""

    registry: str
    input_topic: str
    output_topic: str
    checkpoint: str
    window: Duration
    slide: Duration
    watermark: Duration
    available_now: bool = False
    processing_time: Duration = Duration(10, "s")
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None

    def __post_init__(self) -> None:
        for name in ("registry", "input_topic", "output_topic", "checkpoint"):
            if not getattr(self, name).strip():
                raise ValueError(f"{name.replace('_', ' ')} must not be empty")
        if self.input_topic == self.output_topic:
            raise ValueError(
                f"input and output are both {self.input_topic!r}: the job "
                "would read its own aggregates"
            )
        if self.slide.ms > self.window.ms:
            raise ValueError(
                f"slide {self.slide} is longer than window {self.window}: "
                "events between windows would be lost"
            )


def parse_events(frame: Any) -> Any:
    """``key, tag, event_time, value`` from a boltmq DataFrame; non-events dropped."""
    from pyspark.sql import functions as F

    parsed = frame.select(
        F.get("keys", 0).alias("key"),
        F.col("tags").alias("tag"),
        F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("event"),
    )
    return parsed.where(F.col("key").isNotNull() & F.col("event.event_time_ms").isNotNull()).select(
        "key",
        "tag",
        F.timestamp_millis("event.event_time_ms").alias("event_time"),
        F.col("event.value").alias("value"),
    )


def aggregate(events: Any, job: WindowJob) -> Any:
    """Per (window, key, tag): count, sum, min and max of the values, behind the watermark."""
    from pyspark.sql import functions as F

    window = F.window("event_time", job.window.spark, job.slide.spark)
    return (
        events.withWatermark("event_time", job.watermark.spark)
        .groupBy(window.alias("window"), "key", "tag")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("value").alias("sum"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
        )
    )


def as_messages(aggregates: Any) -> Any:
    """The sink's columns: a JSON ``body``, ``tags``, ``keys`` and ``sharding_key``."""
    from pyspark.sql import functions as F

    body = F.struct(
        "key",
        "tag",
        F.unix_millis("window.start").alias("window_start_ms"),
        F.unix_millis("window.end").alias("window_end_ms"),
        "count",
        "sum",
        "min",
        "max",
    )
    return aggregates.select(
        F.to_json(body, {"ignoreNullFields": "false"}).alias("body"),
        F.col("tag").alias("tags"),
        F.array("key").alias("keys"),
        F.col("key").alias("sharding_key"),
    )


def start(spark: Any, job: WindowJob) -> Any:
    """Start the query (read, parse, aggregate, write); the StreamingQuery."""
    reader = (
        spark.readStream.format("boltmq")
        .option("registry", job.registry)
        .option("topics", job.input_topic)
        .option("startingOffsets", job.starting_offsets)
    )
    if job.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(job.max_offsets_per_trigger))
    messages = as_messages(aggregate(parse_events(reader.load()), job))
    writer = (
        messages.writeStream.format("boltmq")
        .option("registry", job.registry)
        .option("topic", job.output_topic)
        .option("checkpointLocation", job.checkpoint)
        .outputMode("append")
        .queryName(f"window_aggregates_{job.output_topic}")
    )
    if job.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=job.processing_time.spark)
    return writer.start()


@dataclass(frozen=True)
class RunSummary:
    """What one run did, from the query's progress reports."""

    batches: int
    input_rows: int


def run(spark: Any, job: WindowJob) -> RunSummary:
    """Start the query and wait until it stops (available-now: when caught up).

    A failed query raises its StreamingQueryException.
    """
    query = start(spark, job)
    try:
        query.awaitTermination()
    finally:
        if query.isActive:  # interrupted (Ctrl-C): stop between micro-batches
            query.stop()
    progress = query.recentProgress
    return RunSummary(
        batches=len(progress), input_rows=sum(int(p["numInputRows"]) for p in progress)
    )


def parse_args(argv: Sequence[str] | None = None) -> tuple[WindowJob, str]:
    """The job and the Spark master from the command line (usage error, exit 2, if bad)."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.window_aggregates",
        description="Aggregate a topic's events per key and tag over event-time windows "
        "into another topic.",
    )
    parser.add_argument("--registry", required=True, help="host:port of the name registry")
    parser.add_argument("--input", required=True, help="topic of events")
    parser.add_argument("--output", required=True, help="topic the window aggregates go to")
    parser.add_argument(
        "--checkpoint", required=True, help="Spark checkpoint directory (offsets and window state)"
    )
    parser.add_argument(
        "--window", type=duration_arg, default=Duration(1, "m"), help="window length (default 1m)"
    )
    parser.add_argument(
        "--slide",
        type=duration_arg,
        help="slide of sliding windows (default: the window: tumbling)",
    )
    parser.add_argument(
        "--watermark",
        type=duration_arg,
        default=Duration(30, "s"),
        help="how late an event may arrive (default 30s)",
    )
    trigger = parser.add_mutually_exclusive_group()
    trigger.add_argument(
        "--available-now", action="store_true", help="read what the topic holds now, then stop"
    )
    trigger.add_argument(
        "--processing-time",
        type=duration_arg,
        default=Duration(10, "s"),
        help="micro-batch interval when running continuously (default 10s)",
    )
    parser.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="where a new checkpoint starts reading",
    )
    parser.add_argument("--max-offsets-per-trigger", type=positive_int_arg)
    parser.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        help=f"Spark master when no session is active (default {DEFAULT_MASTER})",
    )
    args = parser.parse_args(argv)
    try:
        job = WindowJob(
            registry=args.registry,
            input_topic=args.input,
            output_topic=args.output,
            checkpoint=args.checkpoint,
            window=args.window,
            slide=args.slide or args.window,
            watermark=args.watermark,
            available_now=args.available_now,
            processing_time=args.processing_time,
            starting_offsets=args.starting_offsets,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return job, args.master


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: 0 when the query stopped cleanly, 1 (one line on stderr) if it failed."""
    job, master = parse_args(argv)
    with spark_session("boltmq-window-aggregates", master) as spark:
        try:
            summary = run(spark, job)
        except Exception as exc:
            return report_failure("window_aggregates", exc)
    print(
        f"window_aggregates: {summary.batches} micro-batches, {summary.input_rows} messages "
        f"read from {job.input_topic}, aggregates in {job.output_topic}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
