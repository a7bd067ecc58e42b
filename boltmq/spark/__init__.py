"""PySpark connector: topics and store files as Spark DataFrames (docs/spark.md).

    from boltmq.spark import register
    register(spark)
    spark.read.format("boltmq").option("registry", "127.0.0.1:9876") \\
        .option("topics", "Orders").load()
    spark.read.format("boltmq-commitlog").load("/data/store")

Needs the ``spark`` extra (``pip install 'boltmq[spark]'``) and Java 17+.
"""

from __future__ import annotations

from typing import Any

from boltmq.spark.errors import (
    BoltMQSparkError,
    CorruptCommitLog,
    DataLossError,
    OptionError,
    WriteError,
)

__all__ = [
    "register",
    "BoltMQSparkError",
    "CorruptCommitLog",
    "DataLossError",
    "OptionError",
    "WriteError",
]

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register ``boltmq`` and ``boltmq-commitlog`` with a SparkSession.

    Also turns on Python filter pushdown for the session: Spark refuses to run a
    Python reader that implements pushdown while it is off, and the commitlog
    reader prunes segments and records by topic, queue and store time with it.
    """
    from boltmq.spark.commitlog import CommitLogDataSource
    from boltmq.spark.source import BoltMQDataSource

    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(BoltMQDataSource)
    spark.dataSource.register(CommitLogDataSource)
