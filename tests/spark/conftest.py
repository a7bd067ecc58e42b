"""One local[2] SparkSession for every Spark test, and real clusters to read from.

Java is required: without it the session fixture fails (never skips), so a
machine that cannot run the connector shows it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.producer import Producer
from boltmq.spark import register
from tests.integration.conftest import Cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A small local Spark: 2 cores, no UI, a fast-starting JVM, both formats registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("boltmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A registry, store and broker shared by one test module (topics differ per test)."""
    started = Cluster(tmp_path_factory.mktemp("cluster"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def producer(cluster: Cluster) -> Iterator[Producer]:
    with Producer(cluster.registry.address, "spark-tests") as started:
        yield started


def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"
