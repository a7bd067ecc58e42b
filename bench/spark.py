"""Spark connector throughput: ``python -m bench spark [--messages N] [--path P] [--segment-mb M]
[--repeat R] [--page-cache-mb W]``.

Starts a registry, a store and a broker as processes in a temporary directory,
then measures on a local[2] SparkSession, with N messages of 1 KiB:

- ``write``: a cached DataFrame of N rows written with ``format("boltmq")``;
- ``broker``: a batch read of them through the broker into Spark's ``noop`` sink;
- ``commitlog``: the commitlog reader over the store's directory, same sink.

Each path runs after a warm-up (the JVM and the Python workers are up), once
as its first run and then ``--repeat`` times (3), the same action each time,
each printed as rows/s and MB/s of bodies. The first full run also pays for
the JVM compiling that path's code (the conversion between Arrow batches and
Spark rows: a first read measured up to 6x slower, a first write 2x, and the
compiler keeps working through the next runs); the median of the repeated runs
is the figure, the steady rate a longer job sees. Every write goes to one
topic, so the reads read ``(repeat + 1) * N`` rows (the commitlog reader also
the warm-up's). For the two reads it
also times the connector's own code alone: every partition read in this
process, one after the other, without Spark (``us/row``: what a task spends
per row in our Python; the rest of a Spark run is Spark's).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from boltmq.cli.dev.launcher import ServiceProcess

BODY_BYTES = 1024
PATHS = ("write", "broker", "commitlog")
STORE_SETTINGS = (
    "disk_max_used_space_ratio=100",
    "disk_space_clean_forcibly_ratio=100",
    "disk_space_warning_level_ratio=100",
)
PAGE_CACHE_MB = 256
"""The store's page-cache window here (``commitlog_page_cache_window_bytes``; the store's
default is 1 GiB). The benchmark writes ~1.4 GB while the JVM takes its heap: on the 2-core
VM new pages cost ~15x more once ~1 GiB of them were taken (bench/fresh_pages.py), and a
store releasing its pages 256 MiB behind keeps reusing cheap ones: writes measured
134-137k rows/s against 91-108k with 1 GiB (bench/history/spark.md, "a smaller page-cache
window")."""
TOPIC = "SparkBench"
WARM_UP_ROWS = 4096
"""Rows of the write warm-up (to a topic of its own, so the broker read counts only the timed
writes' rows; the commitlog reader reads every topic's)."""


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from boltmq.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _report(label: str, rows: int, seconds: float) -> None:
    megabytes = rows * BODY_BYTES / 1e6
    print(
        f"{label:<40} {rows:>9,} rows {seconds:7.2f} s {rows / seconds:>10,.0f} rows/s "
        f"{megabytes / seconds:7.1f} MB/s",
        flush=True,
    )


def _timed(label: str, rows: int, action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    seconds = time.perf_counter() - began
    _report(label, rows, seconds)
    return seconds


def _steady(label: str, rows: int, action: Callable[[], object], repeat: int) -> None:
    """``action`` once as the first run, then ``repeat`` times; the median is the figure."""
    _timed(f"  {label}, first", rows, action)
    runs = [_timed(f"  {label}, run {n}", rows, action) for n in range(1, repeat + 1)]
    _report(f"{label} (median of {repeat})", rows, statistics.median(runs))


def _alone(label: str, reader: Any, partitions: Iterable[Any]) -> None:
    """Our reader's own time: every partition read here, in one process, without Spark."""
    rows = 0
    began = time.perf_counter()
    for partition in partitions:
        for batch in reader.read(partition):
            rows += batch.num_rows
    seconds = time.perf_counter() - began
    print(
        f"{label:<40} {rows:>9,} rows {seconds:7.2f} s {seconds / max(rows, 1) * 1e6:10.2f} "
        f"us/row (one core, no Spark)",
        flush=True,
    )


def _noop(frame: Any) -> None:
    frame.write.format("noop").mode("append").save()


def _reader(spark: Any, source: Any, options: dict[str, str], path: str | None = None) -> Any:
    """The connector's DataSourceReader for these options, as Spark would build it."""
    schema = spark.createDataFrame([], source(options).schema()).schema
    if path is not None:
        options = {**options, "path": path}
    return source(options).reader(schema)


def run(
    count: int, paths: tuple[str, ...], root: Path, segment_mb: int, repeat: int, page_cache_mb: int
) -> None:
    from boltmq.spark.commitlog import CommitLogDataSource
    from boltmq.spark.source import BoltMQDataSource

    logs = root / "logs"
    registry = ServiceProcess("registry", logs).start()
    store = ServiceProcess(
        "store",
        logs,
        f"root_dir={root / 'store'}",
        *STORE_SETTINGS,
        f"mapped_file_size_commitlog={segment_mb * 1024 * 1024}",
        f"commitlog_page_cache_window_bytes={page_cache_mb * 1024 * 1024}",
    ).start()
    broker = ServiceProcess(
        "broker", logs, f"store_address={store.address}", f"registry_addresses={registry.address}"
    ).start()
    try:
        spark = _session()
        reg = registry.address
        frame = (
            spark.range(count)
            .selectExpr(f"cast(repeat('x', {BODY_BYTES}) as binary) as body")
            .repartition(4)
            .cache()
        )
        frame.count()

        def save(rows: Any, topic: str) -> Callable[[], None]:
            return (
                rows.write.format("boltmq")
                .option("registry", reg)
                .option("topic", topic)
                .mode("append")
                .save
            )

        if "write" in paths:
            # Warm-up, as for the reads: the first write of a session also starts the
            # Python workers and their producers (seconds, whatever the row count).
            warm = (
                spark.range(WARM_UP_ROWS)
                .selectExpr(f"cast(repeat('x', {BODY_BYTES}) as binary) as body")
                .repartition(4)
            )
            _timed("  write warm-up (workers start)", WARM_UP_ROWS, save(warm, f"{TOPIC}Warm"))
            _steady("write (boltmq)", count, save(frame, TOPIC), repeat)
            written = count * (repeat + 1)
        else:
            save(frame, TOPIC)()
            written = count
        options = {"registry": reg, "topics": TOPIC}
        if "broker" in paths:
            read = spark.read.format("boltmq").options(**options)
            read.load().limit(10).collect()  # warm-up: workers and channels
            _steady("batch read through the broker", written, lambda: _noop(read.load()), repeat)
            reader = _reader(spark, BoltMQDataSource, options)
            _alone("  the broker reader alone", reader, reader.partitions())
        if "commitlog" in paths:
            time.sleep(1.0)  # let the store flush its pages before reading the files
            log = spark.read.format("boltmq-commitlog")
            log.load(str(root / "store")).limit(10).collect()
            stored = written + (WARM_UP_ROWS if "write" in paths else 0)  # every topic's
            _steady(
                "commitlog reader", stored, lambda: _noop(log.load(str(root / "store"))), repeat
            )
            reader = _reader(spark, CommitLogDataSource, {}, str(root / "store"))
            _alone("  the commitlog reader alone", reader, reader.partitions())
        spark.stop()
    finally:
        for proc in (broker, store, registry):
            proc.stop()


def bench_spark(
    count: int,
    paths: tuple[str, ...],
    segment_mb: int,
    repeat: int = 3,
    page_cache_mb: int = PAGE_CACHE_MB,
) -> None:
    """Run :func:`run` in a temporary directory (removed after); ``paths`` empty: all."""
    unknown = sorted(set(paths) - set(PATHS))
    if count <= 0 or segment_mb <= 0 or repeat <= 0 or page_cache_mb < 0 or unknown:
        raise ValueError(
            f"count, segment_mb and repeat must be positive, page_cache_mb "
            f"not negative, and paths among {PATHS}"
        )
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ImportError(
            "the Spark benchmark needs the spark extra (pip install 'boltmq[spark]') and Java 17+"
        ) from None
    with tempfile.TemporaryDirectory() as tmp:
        run(count, paths or PATHS, Path(tmp), segment_mb, repeat, page_cache_mb)
