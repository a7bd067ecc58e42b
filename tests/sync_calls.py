"""Which fsync and fdatasync calls the code under test makes, and on what.

The calls still reach the kernel; each is recorded first with the path of its
descriptor (read from /proc/self/fd), so a test can check what was made durable
and in which order.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

SyncCalls = list[tuple[str, Path]]
"""``("fsync" | "fdatasync", path)`` in call order."""


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> SyncCalls:
    """Record every ``os.fsync`` and ``os.fdatasync`` from now until the test ends."""
    calls: SyncCalls = []

    def recording(kind: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def call(fd: int) -> None:
            calls.append((kind, Path(os.readlink(f"/proc/self/fd/{fd}"))))
            real(fd)

        return call

    monkeypatch.setattr(os, "fsync", recording("fsync", os.fsync))
    monkeypatch.setattr(os, "fdatasync", recording("fdatasync", os.fdatasync))
    return calls
