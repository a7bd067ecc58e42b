"""Fixtures that start real BoltMQ services as processes on port 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import DISK_RATIOS_OFF_SETTINGS
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


# ------------------------------------------------------------------ a whole cluster
CLUSTER_STORE_SETTINGS = (
    "mapped_file_size_commitlog=4194304",
    "mapped_file_size_consume_queue=60000",
    "max_hash_slot_num=5000",
    "max_index_num=20000",
    *DISK_RATIOS_OFF_SETTINGS,
)
"""Small segments: a test's store is created in milliseconds, not gigabytes. The disk
ratios are off: how full this machine's disk is must not decide a test's outcome."""
CLUSTER_REGISTRY_SETTINGS = ("broker_expiry_ms=3000", "scan_interval_ms=100")
CLUSTER_BROKER_SETTINGS = (
    "register_interval_ms=500",
    "client_expiry_ms=3000",
    "client_scan_interval_ms=200",
    "offset_persist_interval_ms=500",
)
"""Short intervals so expiries and take-overs show within seconds; a consumer in a
test heartbeats (rebalances) every few hundred ms, far inside the 3 s client expiry."""


class Cluster:
    """A registry, a store and a broker as real processes, wired together.

    The store and the broker restart on the port they had, so clients holding
    their addresses (the broker's store channel, the SDK's cached routes) reach
    the new process; the store restarts on the same root directory.
    """

    def __init__(self, tmp_path: Path, broker_settings: tuple[str, ...] = ()) -> None:
        self.log_dir = tmp_path / "logs"
        self.broker_settings = broker_settings
        """Settings the broker starts with besides the cluster's (e.g. ``metrics_port=``)."""
        self.root_dir = tmp_path / "store"
        self.started: list[ServiceProcess] = []
        self.registry = self._start("registry", *CLUSTER_REGISTRY_SETTINGS)
        self.store = self._start_store()
        self.broker = self._start_broker()

    def _start(self, service: str, *settings: str, port: int = 0) -> ServiceProcess:
        proc = ServiceProcess(service, self.log_dir, *settings, port=port).start()
        self.started.append(proc)
        return proc

    def _start_store(self, port: int = 0) -> ServiceProcess:
        return self._start("store", f"root_dir={self.root_dir}", *CLUSTER_STORE_SETTINGS, port=port)

    def _start_broker(self, port: int = 0) -> ServiceProcess:
        return self._start(
            "broker",
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            *CLUSTER_BROKER_SETTINGS,
            *self.broker_settings,
            port=port,
        )

    def restart_broker(
        self, *, kill: bool = False, while_down: Callable[[], object] = lambda: None
    ) -> ServiceProcess:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start the broker on its port;
        ``while_down()`` runs in between."""
        self._halt(self.broker, kill)
        while_down()
        self.broker = self._start_broker(self.broker.port)
        return self.broker

    def restart_store(self, *, kill: bool = False) -> ServiceProcess:
        """Stop and start the store on its port and root directory (the broker stays up)."""
        self._halt(self.store, kill)
        self.store = self._start_store(self.store.port)
        return self.store

    @staticmethod
    def _halt(proc: ServiceProcess, kill: bool) -> None:
        if kill:
            proc.kill()
            proc.stop()  # closes the pipe of the dead process
        else:
            code = proc.stop()
            assert code == 0, f"{proc.service} exited {code}: {proc.last_error()}"

    def stop(self) -> None:
        """The broker first, while its store still answers (else it spends its store
        deadline trying to save offsets), then the store; a restart appends the new
        process to ``started``, so the order does not come from there."""
        first = [self.broker, self.store]
        for proc in first + [p for p in reversed(self.started) if p not in first]:
            proc.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A fresh registry + store + broker with test-sized intervals, stopped at the end."""
    started = Cluster(tmp_path)
    yield started
    started.stop()
