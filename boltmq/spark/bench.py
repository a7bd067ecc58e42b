"""Spark connector throughput: ``python -m boltmq.spark.bench [--messages N]``.

Starts a registry, a store and a broker as processes in a temporary directory,
then measures rows/s on a local[2] SparkSession for: a write of N 1 KiB
messages, a batch read of them through the broker, and the commitlog reader
over the store's directory. Each figure is one timed action after a warm-up
read (so the JVM and Python workers are up), the way bench/RESULTS.md reports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from boltmq.launcher import ServiceProcess

BODY_BYTES = 1024
STORE_SETTINGS = ("mapped_file_size_commitlog=67108864", "disk_max_used_space_ratio=100",
                  "disk_space_clean_forcibly_ratio=100", "disk_space_warning_level_ratio=100")


def _session():  # type: ignore[no-untyped-def]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from boltmq.spark import register

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _timed(label: str, rows: int, action) -> None:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    action()
    seconds = time.perf_counter() - began
    print(f"{label:<34} {rows:>9,} rows {seconds:7.2f} s {rows / seconds:>11,.0f} rows/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    count = args.messages
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logs = root / "logs"
        registry = ServiceProcess("registry", logs).start()
        store = ServiceProcess("store", logs, f"root_dir={root / 'store'}", *STORE_SETTINGS).start()
        broker = ServiceProcess("broker", logs, f"store_address={store.address}",
                                f"registry_addresses={registry.address}").start()
        try:
            spark = _session()
            reg = registry.address
            frame = spark.range(count).selectExpr(
                f"cast(repeat('x', {BODY_BYTES}) as binary) as body",
                "concat('k', cast(id as string)) as sharding_key").drop("sharding_key") \
                .repartition(4).cache()
            frame.count()
            writer = frame.write.format("boltmq").option("registry", reg) \
                .option("topic", "SparkBench").option("batchSize", "512").mode("append")
            _timed("write (boltmq)", count, writer.save)
            read = spark.read.format("boltmq").option("registry", reg) \
                .option("topics", "SparkBench")
            read.load().limit(10).collect()  # warm-up: workers and channels
            _timed("batch read through the broker", count,
                   lambda: read.load().write.format("noop").mode("append").save())
            time.sleep(1.0)  # let the store flush its pages before reading the files
            log = spark.read.format("boltmq-commitlog")
            _timed("commitlog reader", count,
                   lambda: log.load(str(root / "store")).write.format("noop")
                   .mode("append").save())
            spark.stop()
        finally:
            for proc in (broker, store, registry):
                proc.stop()


if __name__ == "__main__":
    main()
