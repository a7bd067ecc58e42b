"""Tests of the benchmarks: each runs a benchmark module small and checks what it prints."""

from __future__ import annotations

import subprocess
import sys

from boltmq.cli.dev.launcher import REPO_ROOT


def run_bench(module: str, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m <module> ARGS`` from the checkout (``bench`` is not an installed
    package), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


SMALL_BACKLOG = (
    "--messages",
    "20000",
    "--batch",
    "256",
    "--segment-mb",
    "1",
    "--window-mb",
    "1",
    "--probe-seconds",
    "0.5",
)
"""A backlog small enough for a test: 20,000 messages in 1 MiB segments, a 1 MiB window."""
