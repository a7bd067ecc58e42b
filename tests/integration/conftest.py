"""Fixtures that start real BoltMQ services as processes on port 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.procs import ServiceProcess


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    """``spawn("store", "root_dir=...")``: a started service, stopped at the end."""
    started: list[ServiceProcess] = []

    def factory(service: str, *settings: str) -> ServiceProcess:
        proc = ServiceProcess(service, tmp_path / "logs", *settings).start()
        started.append(proc)
        return proc

    yield factory
    for proc in reversed(started):
        proc.stop()
