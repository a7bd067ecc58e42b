"""Batch job: a store directory to a Parquet dataset plus per-topic statistics.

    python -m pipelines.store_export data/store --output /tmp/export

Reads the store's CommitLog segments offline with ``format("boltmq-commitlog")``
(no services needed; a running store can be read too) and writes:

| path                         | what                                                        |
|------------------------------|-------------------------------------------------------------|
| ``OUTPUT/messages/topic=T/`` | Parquet, partitioned by topic: every message, the commitlog |
|                              | reader's columns plus ``body_bytes`` (the body's length)    |
| ``OUTPUT/stats/``            | Parquet: one row per topic (:mod:`pipelines.topic_stats`)   |
| ``OUTPUT/stats.json``        | the same rows as a JSON list, times as ms since the epoch   |

and prints the statistics as a table. Progress (tasks done per step) is shown
with rich while Spark works. A damaged record fails the job with the segment
and offset (``--corrupt-records mark`` keeps it, flagged in column ``corrupt``).
An existing non-empty ``OUTPUT`` is refused unless ``--overwrite``; then only
the three paths above are replaced.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pipelines.durations import positive_int_arg
from pipelines.failure import report_failure
from pipelines.progress import SparkProgress
from pipelines.session import DEFAULT_MASTER, spark_session
from pipelines.topic_stats import collect_records, print_table, topic_stats, write_json

MESSAGES_DIR: Final = "messages"
STATS_DIR: Final = "stats"
STATS_JSON: Final = "stats.json"
LARGEST_DEFAULT: Final = 3


@dataclass(frozen=True)
class ExportJob:
    """What to export and where; checked before Spark starts."""

    store: Path
    output: Path
    largest: int = LARGEST_DEFAULT
    topics: tuple[str, ...] = ()
    overwrite: bool = False
    corrupt_records: str = "fail"
    progress: bool = True

    def __post_init__(self) -> None:
        from boltmq.spark.commitlog import segment_files

        segment_files(str(self.store))  # OptionError: not a store, or no segments
        if self.largest < 1:
            raise ValueError(f"largest messages per topic must be at least 1, not {self.largest}")
        if self.corrupt_records not in ("fail", "mark"):
            raise ValueError(f"corrupt records {self.corrupt_records!r}: expected fail or mark")
        if self.output.exists() and not self.output.is_dir():
            raise ValueError(f"output {str(self.output)!r} exists and is not a directory")
        if self.output.is_dir() and any(self.output.iterdir()) and not self.overwrite:
            raise ValueError(
                f"output {str(self.output)!r} is not empty: pass --overwrite to "
                f"replace its {MESSAGES_DIR}/, {STATS_DIR}/ and {STATS_JSON}"
            )
        if self.output.resolve().is_relative_to(self.store.resolve()):
            raise ValueError("the output must not be inside the store directory")


@dataclass(frozen=True)
class ExportResult:
    """Where the dataset went and the statistics it has (as in stats.json)."""

    messages_path: Path
    stats_path: Path
    json_path: Path
    stats: list[dict[str, Any]]

    @property
    def messages(self) -> int:
        """Rows of the Parquet dataset."""
        return sum(int(s["messages"]) for s in self.stats)


def read_store(spark: Any, job: ExportJob) -> Any:
    """The store's messages with ``body_bytes``; ``--topics`` pushed down to the reader."""
    from pyspark.sql import functions as F

    frame = (
        spark.read.format("boltmq-commitlog")
        .option("corruptRecords", job.corrupt_records)
        .load(str(job.store))
    )
    if job.topics:
        frame = frame.where(F.col("topic").isin(list(job.topics)))
    return frame.withColumn("body_bytes", F.length("body").cast("long"))


def export(spark: Any, job: ExportJob) -> ExportResult:
    """Write the dataset and the statistics; the statistics as collected."""
    mode = "overwrite" if job.overwrite else "errorifexists"
    messages_path = job.output / MESSAGES_DIR
    stats_path = job.output / STATS_DIR
    messages = read_store(spark, job)
    with SparkProgress(spark, enabled=job.progress) as progress:
        with progress.step("store -> parquet"):
            messages.write.mode(mode).partitionBy("topic").parquet(str(messages_path))
        # Statistics from the dataset just written: it has body_bytes, so no body is read.
        written = spark.read.schema(messages.schema).parquet(str(messages_path))
        with progress.step("topic statistics"):
            topic_stats(written, job.largest).coalesce(1).write.mode(mode).parquet(str(stats_path))
        with progress.step("collect statistics"):
            stats = collect_records(spark.read.parquet(str(stats_path)).orderBy("topic"))
    json_path = job.output / STATS_JSON
    write_json(stats, json_path)
    return ExportResult(messages_path, stats_path, json_path, stats)


def parse_args(argv: Sequence[str] | None = None) -> tuple[ExportJob, str]:
    """The job and the Spark master from the command line (usage error, exit 2, if bad)."""
    from boltmq.spark.errors import OptionError

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.store_export",
        description="Turn a store directory into a Parquet dataset partitioned by topic, "
        "with per-topic statistics.",
    )
    parser.add_argument("store", type=Path, help="store root (holding commitlog/)")
    parser.add_argument("--output", type=Path, required=True, help="output directory")
    parser.add_argument("--topics", default="", help="comma list: export only these topics")
    parser.add_argument(
        "--largest",
        type=positive_int_arg,
        default=LARGEST_DEFAULT,
        help=f"largest messages listed per topic (default {LARGEST_DEFAULT})",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a previous export in OUTPUT"
    )
    parser.add_argument("--corrupt-records", choices=("fail", "mark"), default="fail")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        help=f"Spark master when no session is active (default {DEFAULT_MASTER})",
    )
    args = parser.parse_args(argv)
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    try:
        job = ExportJob(
            store=args.store,
            output=args.output,
            largest=args.largest,
            topics=topics,
            overwrite=args.overwrite,
            corrupt_records=args.corrupt_records,
            progress=not args.no_progress,
        )
    except (OptionError, ValueError) as exc:
        parser.error(str(exc))
    return job, args.master


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: 0 on success, 1 (one line on stderr) when Spark failed."""
    job, master = parse_args(argv)
    with spark_session("boltmq-store-export", master) as spark:
        try:
            result = export(spark, job)
        except Exception as exc:
            return report_failure("store_export", exc)
    print_table(
        result.stats,
        f"{job.store}: {result.messages:,} messages in {len(result.stats)} topics (times UTC)",
    )
    print(f"dataset    {result.messages_path}  (Parquet, partitioned by topic)")
    print(f"statistics {result.stats_path}  and  {result.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
