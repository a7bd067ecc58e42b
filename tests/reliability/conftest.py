"""Fixtures of the fault tests: a real cluster with a chosen flush mode, and its checks.

:class:`FaultCluster` is the integration tests' registry + store + broker
(:class:`tests.integration.conftest.Cluster`) with the store's flush mode and
extra settings chosen by the test. :func:`check_files` is the independent
verdict on a stopped store: ``boltmq store verify`` as its own process, and
the CommitLog read by :mod:`tests.reliability.files`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boltmq.cli.dev.launcher import REPO_ROOT, ServiceProcess
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS, Cluster
from tests.reliability.files import (
    CommitLogScan,
    exactly_once,
    queues_in_order,
    scan_commitlog,
)
from tests.reliability.load import Ack

UNHANDLED_MARKS = (
    "Traceback (most recent call last)",
    "Task was destroyed but it is pending",
    "exception was never retrieved",
)
"""What a service log must never hold after a fault test."""


class FaultCluster(Cluster):
    """A registry, a store (``flush``, ``store_settings``, ``root_dir``) and a broker
    (``broker_settings``)."""

    def __init__(
        self,
        tmp_path: Path,
        flush: str = "SYNC_FLUSH",
        store_settings: tuple[str, ...] = (),
        root_dir: Path | None = None,
        broker_settings: tuple[str, ...] = (),
    ) -> None:
        self.store_settings = (*CLUSTER_STORE_SETTINGS, f"flush_disk_type={flush}", *store_settings)
        self.store_root = root_dir
        self.broker_settings = broker_settings
        super().__init__(tmp_path)

    def _start_broker(self, port: int = 0) -> ServiceProcess:
        return self._start(
            "broker",
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            *CLUSTER_BROKER_SETTINGS,
            *self.broker_settings,
            port=port,
        )

    def _start_store(self, port: int = 0) -> ServiceProcess:
        if self.store_root is not None:
            self.root_dir = self.store_root
        return self._start("store", f"root_dir={self.root_dir}", *self.store_settings, port=port)

    def stop_store(self) -> None:
        """SIGTERM the store and wait: its files are then a clean shutdown's."""
        code = self.store.stop()
        assert code == 0, f"store exited {code}: {self.store.last_error()}"

    def start_store(self) -> ServiceProcess:
        """Start the store again on its port and root directory."""
        self.store = self._start_store(self.store.port)
        return self.store

    def tracebacks(self) -> list[str]:
        """Each log of this cluster's processes that holds a Python traceback, or asyncio's
        report of a task or future nobody finished or read (a leak in waiting), as its name
        and the text from the first such mark on (so a failure shows what happened)."""
        found = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace")
            starts = [text.find(mark) for mark in UNHANDLED_MARKS if mark in text]
            if starts:
                start = min(starts)
                found.append(f"{path.name}: {text[start : start + 4000]}")
        return found


@pytest.fixture
def fault_cluster(tmp_path: Path) -> Iterator[Callable[..., FaultCluster]]:
    """``fault_cluster(flush=..., store_settings=...)``: started, stopped at the end."""
    started: list[FaultCluster] = []

    def factory(**options: object) -> FaultCluster:
        cluster = FaultCluster(tmp_path, **options)  # type: ignore[arg-type]
        started.append(cluster)
        return cluster

    yield factory
    for cluster in started:
        cluster.stop()


def offline_verify(root: Path) -> list[str]:
    """``boltmq store verify ROOT`` in its own process: its problem lines (empty: sound)."""
    done = subprocess.run(
        [sys.executable, "-m", "boltmq.cli", "store", "verify", str(root)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    if done.returncode == 0:
        return []
    return done.stdout.splitlines() + done.stderr.splitlines() or [f"exit {done.returncode}"]


def check_files(root: Path, acked: dict[bytes, Ack]) -> CommitLogScan:
    """The invariants on a stopped store's files; the scan, for more checks."""
    problems = offline_verify(root)
    assert problems == [], f"boltmq store verify: {problems[:10]}"
    scan = check_acknowledged(root, acked)
    order = queues_in_order(scan)
    assert order == [], order[:5]
    return scan


def check_acknowledged(root: Path, acked: dict[bytes, Ack]) -> CommitLogScan:
    """Every acknowledged body is in the CommitLog files exactly once, where its ack said."""
    scan = scan_commitlog(root)
    assert not scan.damage, f"CommitLog damaged: {scan.damage}"
    problems = exactly_once(acked, scan)
    assert problems == [], f"{len(problems)} of {len(acked)} acknowledged: {problems[:5]}"
    where = {r.body: (r.queue_id, r.queue_offset, r.commitlog_offset) for r in scan.records}
    moved = [
        body
        for body, ack in acked.items()
        if where[body] != (ack.queue_id, ack.queue_offset, ack.commitlog_offset)
    ]
    assert moved == [], f"stored elsewhere than acknowledged: {moved[:5]}"
    return scan
