"""LocalCluster: a registry and one broker group as child processes (``boltmq dev``).

A broker group is members 0..N: member 0 starts as the master, the others as
replicas (docs/ha.md). Each member is a store, the broker in front of it
(broker id = member index while it is a replica, 0 while it is the master)
and, when the group has replicas, the HA service beside the store. Replicas'
HA services find the master through the registry, so a promotion or a
rejoining old master needs no reconfiguration.

Data of member ``i`` lives in ``DATA_DIR/store`` (the master) and
``DATA_DIR/store-replica-i``; logs in ``DATA_DIR/logs``. The integration
tests start the same processes with the same settings, on port 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from boltmq.cli.dev.certificates import DevCertificates
from boltmq.cli.dev.launcher import ServiceProcess

BROKER_NAME = "broker-a"


@dataclass
class Member:
    """One store, its broker and its HA service."""

    index: int
    data_dir: Path
    store: ServiceProcess
    broker: ServiceProcess | None = None
    ha: ServiceProcess | None = None

    def processes(self) -> list[ServiceProcess]:
        """Start order: store, HA, broker."""
        return [p for p in (self.store, self.ha, self.broker) if p is not None]


@dataclass
class ClusterSpec:
    """What to start; every port 0 picks a free one."""

    data_dir: Path
    replicas: int = 0
    host: str = "127.0.0.1"
    registry_port: int = 0
    store_port: int = 0
    broker_port: int = 0
    ha_port: int = 0
    flush: str = "ASYNC_FLUSH"
    master_role: str = "ASYNC_MASTER"
    store_settings: tuple[str, ...] = ()
    broker_settings: tuple[str, ...] = ()
    ha_settings: tuple[str, ...] = ()
    registry_settings: tuple[str, ...] = ()
    certificates: DevCertificates | None = None
    """``boltmq dev --tls``: every service serves and calls with its own component
    certificate (its ``tls_*`` settings: :meth:`DevCertificates.settings_for`)."""

    def tls_settings(self, role: str) -> tuple[str, ...]:
        """The ``tls_*`` settings of service ``role`` (none without certificates)."""
        if self.certificates is None:
            return ()
        return self.certificates.settings_for(role, BROKER_NAME)


@dataclass
class LocalCluster:
    """The processes of a :class:`ClusterSpec`, started in dependency order."""

    spec: ClusterSpec
    registry: ServiceProcess | None = None
    members: list[Member] = field(default_factory=list)
    _started: list[ServiceProcess] = field(default_factory=list)

    @property
    def log_dir(self) -> Path:
        return self.spec.data_dir / "logs"

    def start(self) -> LocalCluster:
        """Start everything; LaunchError (after stopping what started) if one fails."""
        spec = self.spec
        try:
            self.registry = self._launch(
                ServiceProcess(
                    "registry",
                    self.log_dir,
                    *spec.registry_settings,
                    *spec.tls_settings("registry"),
                    port=spec.registry_port,
                    host=spec.host,
                )
            )
            for index in range(spec.replicas + 1):
                self.members.append(self.start_member(index))
        except Exception:
            self.stop()
            raise
        return self

    def member_dir(self, index: int) -> Path:
        return self.spec.data_dir / ("store" if index == 0 else f"store-replica-{index}")

    def start_member(self, index: int, *, role: str | None = None) -> Member:
        """Start member ``index``'s store, HA service and broker (again, after a kill)."""
        spec = self.spec
        assert self.registry is not None
        first = index == 0
        data_dir = self.member_dir(index)
        store_role = role or (spec.master_role if first else "SLAVE")
        store = self._launch(
            ServiceProcess(
                "store",
                self.log_dir,
                f"root_dir={data_dir}",
                f"flush_disk_type={spec.flush}",
                f"broker_role={store_role}",
                *spec.store_settings,
                *spec.tls_settings("store"),
                port=spec.store_port if first else 0,
                host=spec.host,
            )
        )
        member = Member(index, data_dir, store)
        if spec.replicas:
            member.ha = self._launch(
                ServiceProcess(
                    "ha",
                    self.log_dir,
                    f"store_address={store.address}",
                    f"registry_addresses={self.registry.address}",
                    f"broker_name={BROKER_NAME}",
                    *spec.ha_settings,
                    *spec.tls_settings("ha"),
                    port=spec.ha_port if first else 0,
                    host=spec.host,
                )
            )
        ha_setting = (f"ha_address={member.ha.address}",) if member.ha else ()
        member.broker = self._launch(
            ServiceProcess(
                "broker",
                self.log_dir,
                f"store_address={store.address}",
                f"registry_addresses={self.registry.address}",
                f"broker_name={BROKER_NAME}",
                f"broker_id={index}",
                *ha_setting,
                *spec.broker_settings,
                *spec.tls_settings("broker"),
                port=spec.broker_port if first else 0,
                host=spec.host,
            )
        )
        return member

    def _launch(self, process: ServiceProcess) -> ServiceProcess:
        process.start()
        self._started.append(process)
        return process

    def processes(self) -> Iterable[ServiceProcess]:
        """Every process started so far, in start order."""
        return list(self._started)

    def stop(self) -> list[int | None]:
        """Stop in reverse start order (brokers first: they persist offsets); exit codes."""
        codes = [p.stop() for p in reversed(self._started) if p.proc is not None]
        self._started.clear()
        return codes
