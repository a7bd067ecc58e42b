"""The repository as the documents' tests see it: its root and the files git tracks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def tracked_files() -> list[str]:
    """Every path git tracks, relative to the root; skips the test outside a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout ({exc})")
    return [name for name in listed.stdout.decode().split("\0") if name]
