"""``python -m bench.security_cost``: every cluster starts (the baseline one from the
checkout given, here this one), every workload prints its figures and each cluster's
ratio to the plain one; bad options are refused."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.bench import run_bench

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ("batched", "one at a time", "consume")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.security_cost", *args, timeout_s=600)


@pytest.mark.timeout(900)
def test_a_small_run_prints_each_workload_on_every_cluster_and_the_ratios() -> None:
    done = run("--count", "600", "--single", "20", "--rounds", "1", "--baseline", str(REPO_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for cluster in ("plain", "tls+acl", "plain@baseline"):
        for workload in WORKLOADS:
            shown = [line for line in lines if line.startswith(f"[{cluster}, round 1] {workload}:")]
            assert len(shown) == 1, (cluster, workload, lines)
            assert re.search(r"[\d,]+ msg/s", shown[0]), shown[0]
    for workload in WORKLOADS:
        for cluster in ("tls+acl", "plain@baseline"):
            ratio = [line for line in lines if line.startswith(f"round 1 {workload}: {cluster} ")]
            assert len(ratio) == 1 and re.search(r"= \d+\.\d\dx$", ratio[0]), lines


@pytest.mark.parametrize("flag", ["--count", "--single", "--rounds"])
def test_bad_options_are_refused(flag: str) -> None:
    done = run(flag, "0")
    assert done.returncode == 2
    assert f"{flag} must be positive" in done.stderr


def test_a_baseline_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    done = run("--baseline", str(tmp_path))
    assert done.returncode == 2
    assert "not a checkout with generated stubs" in done.stderr
