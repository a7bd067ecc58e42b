"""``python -m bench.groups_scale``: both clusters start (one broker group, two), every
workload prints its figures and the two-group/one-group ratio; bad options are refused."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.bench import run_bench

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("batched", "consume")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.groups_scale", *args, timeout_s=600)


@pytest.mark.timeout(900)
def test_a_small_run_prints_each_workload_on_both_clusters_and_the_ratio() -> None:
    done = run("--count", "2048", "--rounds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for cluster in ("1 group", "2 groups"):
        for workload in WORKLOADS:
            shown = [line for line in lines if line.startswith(f"[{cluster}, round 1] {workload}:")]
            assert len(shown) == 1, (cluster, workload, lines)
            assert re.search(r"[\d,]+ msg/s", shown[0]), shown[0]
    for workload in WORKLOADS:
        ratio = [line for line in lines if line.startswith(f"round 1 {workload}: 2 groups ")]
        assert len(ratio) == 1 and re.search(r"vs 1 group .*= \d+\.\d\dx$", ratio[0]), lines


@pytest.mark.parametrize("flag", ["--count", "--threads", "--rounds", "--size"])
def test_bad_options_are_refused(flag: str) -> None:
    done = run(flag, "0")
    assert done.returncode == 2
    assert f"{flag} must be positive" in done.stderr
