"""Per-topic statistics of a message dataset, computed by Spark, shown with rich.

One row per topic:

| column               | type      | meaning                                              |
|----------------------|-----------|------------------------------------------------------|
| ``topic``            | string    |                                                      |
| ``messages``         | long      | messages in the dataset                              |
| ``body_bytes``       | long      | sum of body lengths                                  |
| ``first_store_time`` | timestamp | oldest store time                                    |
| ``last_store_time``  | timestamp | newest store time                                    |
| ``rate_per_minute``  | double    | messages * 60000 / span in ms, span = last - first   |
|                      |           | store time, at least one minute                      |
| ``peak_per_minute``  | long      | messages of the busiest calendar minute (UTC)        |
| ``largest``          | array     | the ``top`` largest bodies, largest first (ties: the |
|                      |           | older record first), each ``struct<rank int, msg_id  |
|                      |           | string, queue_id int, queue_offset long,             |
|                      |           | commitlog_offset long, body_bytes long>``            |

In ``stats.json`` the two times are ``first_store_time_ms`` / ``last_store_time_ms``.

The input has the commitlog reader's columns plus ``body_bytes`` (the Parquet
dataset of :mod:`pipelines.store_export`), so the statistics never read a body.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

MINUTE_MS: Final = 60_000
PIPE_WIDTH: Final = 140
"""Columns of the table when stdout is not a terminal (rich would assume 80)."""


def topic_stats(messages: Any, top: int) -> Any:
    """The statistics DataFrame (module docstring) of ``messages``, ordered by topic."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_minute = messages.groupBy("topic", F.date_trunc("minute", "store_timestamp")).agg(
        F.count(F.lit(1)).alias("messages"),
        F.sum("body_bytes").alias("body_bytes"),
        F.min("store_timestamp").alias("first_store_time"),
        F.max("store_timestamp").alias("last_store_time"),
    )
    span_ms = F.greatest(
        F.unix_millis("last_store_time") - F.unix_millis("first_store_time"), F.lit(MINUTE_MS)
    )
    totals = (
        per_minute.groupBy("topic")
        .agg(
            F.sum("messages").alias("messages"),
            F.sum("body_bytes").alias("body_bytes"),
            F.min("first_store_time").alias("first_store_time"),
            F.max("last_store_time").alias("last_store_time"),
            F.max("messages").alias("peak_per_minute"),
        )
        .withColumn("rate_per_minute", F.col("messages") * MINUTE_MS / span_ms)
    )
    order = Window.partitionBy("topic").orderBy(F.col("body_bytes").desc(), "commitlog_offset")
    largest = (
        messages.select(
            "topic", "msg_id", "queue_id", "queue_offset", "commitlog_offset", "body_bytes"
        )
        .withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") <= top)
        .groupBy("topic")
        .agg(
            F.sort_array(
                F.collect_list(
                    F.struct(
                        "rank",
                        "msg_id",
                        "queue_id",
                        "queue_offset",
                        "commitlog_offset",
                        "body_bytes",
                    )
                )
            ).alias("largest")
        )
    )
    return (
        totals.join(largest, "topic")
        .select(
            "topic",
            "messages",
            "body_bytes",
            "first_store_time",
            "last_store_time",
            "rate_per_minute",
            "peak_per_minute",
            "largest",
        )
        .orderBy("topic")
    )


def collect_records(stats: Any) -> list[dict[str, Any]]:
    """The statistics as JSON-ready dicts, store times as ms since the epoch.

    Times are converted by Spark (``unix_millis``): a collected timestamp is a
    naive datetime in the Python process's local zone, not the session's.
    """
    from pyspark.sql import functions as F

    times = ("first_store_time", "last_store_time")
    flat = stats.select(
        *[F.unix_millis(c).alias(f"{c}_ms") if c in times else c for c in stats.columns]
    )
    return [row.asDict(recursive=True) for row in flat.collect()]


def write_json(records: Sequence[dict[str, Any]], path: Path) -> None:
    """The statistics as one JSON document (a list, one object per topic)."""
    path.write_text(json.dumps(list(records), indent=2) + "\n")


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%m-%d %H:%M:%S")


def print_table(records: Sequence[dict[str, Any]], title: str) -> None:
    """A rich table of the statistics, one row per topic (the largest message only)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("topic", no_wrap=True)
    for name in (
        "messages",
        "body bytes",
        "first stored",
        "last stored",
        "rate/min",
        "peak/min",
        "largest (queue@offset)",
    ):
        table.add_column(name, justify="right", no_wrap=True)
    for r in records:
        top = r["largest"][0]
        table.add_row(
            r["topic"],
            f"{r['messages']:,}",
            _size(r["body_bytes"]),
            _time(r["first_store_time_ms"]),
            _time(r["last_store_time_ms"]),
            f"{r['rate_per_minute']:,.1f}",
            f"{r['peak_per_minute']:,}",
            f"{_size(top['body_bytes'])} q{top['queue_id']}@{top['queue_offset']}",
        )
    console = Console()
    if not console.is_terminal:  # a pipe or a log: 80 columns would cut the cells short
        console = Console(width=PIPE_WIDTH)
    console.print(table)
