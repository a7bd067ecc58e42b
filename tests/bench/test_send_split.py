"""``python -m bench.send_split`` against a real registry, store and broker; its bad options."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.bench import run_bench
from tests.integration.conftest import Cluster

WAYS = ("sdk", "request", "request+results", "raw")


def run_split(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.send_split", *args, timeout_s=120)


def test_each_way_prints_its_rate_cpu_and_percentiles(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        done = run_split(
            "--registry", cluster.registry.address, "--batch", "4", "--calls", "3", "--rounds", "1"
        )
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(WAYS)
    for line in lines:
        assert re.search(
            r" [\d,]+ msg/s  client CPU +\d+\.\d\d us/msg  "
            r"p50=\d+\.\d+ms p99=\d+\.\d+ms$",
            line,
        ), line


@pytest.mark.parametrize(
    "args, words",
    [
        (["--registry", "127.0.0.1:1", "--batch", "0"], "--batch"),
        (["--registry", "127.0.0.1:1", "--size", "4"], "--size"),
        (["--registry", "127.0.0.1:1", "--calls", "0"], "--calls"),
        ([], "--registry"),
    ],
)
def test_bad_options_are_refused(args: list[str], words: str) -> None:
    done = run_split(*args)
    assert done.returncode == 2 and words in done.stderr


def test_an_unreachable_registry_is_one_clear_line() -> None:
    done = run_split("--registry", "127.0.0.1:1", "--calls", "1")
    assert done.returncode == 1
    assert done.stderr.startswith("send_split: no registry reachable")
    assert "Traceback" not in done.stderr
