"""The SparkSession a job runs in: the caller's, or a small local one it owns.

A job's ``main()`` runs inside ``spark-submit`` or a notebook (a session is
active: it is used as it is and left running) or from ``python -m`` (no session:
one is built for ``--master`` and stopped at the end). Either way both BoltMQ
formats are registered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

DEFAULT_MASTER: Final = "local[2]"
SHUFFLE_PARTITIONS: Final = 4
"""Partitions of a shuffle (and a streaming query's state store, fixed at its first
checkpoint). Spark's default of 200 makes each small micro-batch start 200 tasks."""

_LOCAL_CONF: Final = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
    # Start-up time matters more than peak JIT speed for jobs of a few seconds.
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


@contextmanager
def spark_session(app_name: str, master: str = DEFAULT_MASTER) -> Iterator[Any]:
    """The active session, or a new local one stopped on exit; formats registered."""
    from pyspark.sql import SparkSession

    from boltmq.spark import register

    session = SparkSession.getActiveSession()
    owned = session is None
    if session is None:
        # Python workers must run this interpreter (its venv has boltmq). Spark's
        # planner and data source workers read only the environment variable; the
        # spark.pyspark.python setting is honoured by spark-submit alone.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in _LOCAL_CONF.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        # FATAL: a failed job prints one line of its own (pipelines/failure.py), not
        # the JVM stack traces Spark logs at ERROR before raising the same error.
        session.sparkContext.setLogLevel("FATAL")
    register(session)
    try:
        yield session
    finally:
        if owned:
            session.stop()
