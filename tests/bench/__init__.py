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
