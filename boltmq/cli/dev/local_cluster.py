"""LocalCluster: a registry and broker groups as child processes (``boltmq dev``).

The cluster has ``groups`` broker groups named ``broker-a``, ``broker-b``, ...
(:func:`group_name`; at most :data:`MAX_GROUPS`), all registered with the one
registry. A broker group is members 0..N: member 0 starts as the master, the
others as replicas (docs/ha.md). Each member is a store, the broker in front
of it (broker id = member index while it is a replica, 0 while it is the
master) and, when the group has replicas, the HA service beside the store.
Replicas' HA services find the master through the registry, so a promotion or
a rejoining old master needs no reconfiguration.

Ports: group ``g`` (0 for broker-a) listens on the given base ports plus
``PORT_STEP * g`` (RocketMQ's 10911, 10921, ...); a base port of 0 picks free
ports. Message ids: every member of group ``g`` writes the store identity
``store_host:(broker port + PORT_STEP * g)`` (10911 when the broker port is 0) into
its message ids (``store_host`` / ``store_port``), so two groups on one
machine never share an id prefix and an id leads to the group that stored it;
a group's replicas share it, so an id still resolves after a failover.

Data of broker-a's member ``i`` lives in ``DATA_DIR/store`` (the master) and
``DATA_DIR/store-replica-i``; another group's in ``DATA_DIR/<group>/store``
and ``DATA_DIR/<group>/store-replica-i``; logs of all in ``DATA_DIR/logs``. The
integration tests start the same processes with the same settings, on port 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from boltmq.cli.dev.certificates import DevCertificates
from boltmq.cli.dev.launcher import ServedAlongside, ServiceProcess

BROKER_NAME = "broker-a"
"""The first group's name (the only one of a one-group cluster)."""
MAX_GROUPS = 26
"""Groups ``broker-a`` .. ``broker-z``."""
PORT_STEP = 10
"""Port distance between consecutive groups' services."""
STORE_ID_PORT = 10911
"""Port of the store identity in message ids when the broker port is picked freely."""
PORT_MAX = 65535


def group_name(group: int) -> str:
    """``broker-a`` for group 0, ``broker-b`` for 1, ..."""
    return f"broker-{chr(ord('a') + group)}"


def group_port(base: int, group: int) -> int:
    """Group ``group``'s port for base port ``base`` (0 stays 0: a free port)."""
    return base + PORT_STEP * group if base else 0


@dataclass
class Member:
    """One store, its broker and its HA service."""

    index: int
    data_dir: Path
    store: ServiceProcess | ServedAlongside
    """The store's process, or the broker's when the broker serves it (``colocated``)."""
    broker: ServiceProcess | None = None
    ha: ServiceProcess | None = None
    group: str = BROKER_NAME

    def processes(self) -> list[ServiceProcess]:
        """Start order: store, HA, broker (one process for a broker serving its store)."""
        store = self.store if isinstance(self.store, ServiceProcess) else None
        return [p for p in (store, self.ha, self.broker) if p is not None]


@dataclass
class ClusterSpec:
    """What to start; every port 0 picks a free one."""

    data_dir: Path
    replicas: int = 0
    """Replicas of every group."""
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
    groups: int = 1
    """Broker groups (``broker-a`` ..., at most :data:`MAX_GROUPS`)."""
    mqtt_port: int = -1
    """Port of the MQTT gateway started after the brokers (-1: none; 0: any free one)."""
    mqtt_settings: tuple[str, ...] = ()
    colocated: bool = False
    """Each broker serves its store in its own process (``serve broker --with-store``:
    the broker calls the store without a hop); not with replicas, whose HA service
    must start between the two."""

    def __post_init__(self) -> None:
        if type(self.groups) is not int or not 1 <= self.groups <= MAX_GROUPS:
            raise ValueError(
                f"broker groups must be 1..{MAX_GROUPS} (broker-a .. broker-z), not {self.groups!r}"
            )
        if self.colocated and self.replicas:
            raise ValueError(
                "a broker serving its store (colocated) runs without replicas: each replica's "
                "HA service starts between its store and its broker"
            )
        last = self.groups - 1
        for name in ("store_port", "broker_port", "ha_port")[: 3 if self.replicas else 2]:
            if group_port(getattr(self, name), last) > PORT_MAX:
                raise ValueError(
                    f"{name} {getattr(self, name)} leaves no port for {group_name(last)} "
                    f"(each group adds {PORT_STEP}; the last would be "
                    f"{group_port(getattr(self, name), last)} > {PORT_MAX})"
                )

    def group_names(self) -> list[str]:
        return [group_name(g) for g in range(self.groups)]

    def tls_settings(self, role: str, group: str = BROKER_NAME) -> tuple[str, ...]:
        """The ``tls_*`` settings of service ``role`` of ``group`` (none without
        certificates)."""
        if self.certificates is None:
            return ()
        return self.certificates.settings_for(role, group)

    def store_identity(self, group: int) -> tuple[str, ...]:
        """The ``store_port`` setting every member of ``group`` writes into its message
        ids beside ``store_host`` (the module docstring)."""
        return (f"store_port={(self.broker_port or STORE_ID_PORT) + PORT_STEP * group}",)


@dataclass
class LocalCluster:
    """The processes of a :class:`ClusterSpec`, started in dependency order."""

    spec: ClusterSpec
    registry: ServiceProcess | None = None
    mqtt: ServiceProcess | None = None
    """The MQTT gateway (``mqtt_port`` >= 0)."""
    groups: dict[str, list[Member]] = field(default_factory=dict)
    """Members of every group started so far, by group name, in group order."""
    _started: list[ServiceProcess] = field(default_factory=list)

    @property
    def members(self) -> list[Member]:
        """The first group's (broker-a's) members."""
        return self.groups.get(BROKER_NAME, [])

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
            for group in spec.group_names():
                members = self.groups.setdefault(group, [])
                for index in range(spec.replicas + 1):
                    members.append(self.start_member(index, group=group))
            if spec.mqtt_port >= 0:
                self.mqtt = self._launch(
                    ServiceProcess(
                        "mqtt",
                        self.log_dir,
                        f"registry={self.registry.address}",
                        *spec.mqtt_settings,
                        port=spec.mqtt_port,
                        host=spec.host,
                    )
                )
        except Exception:
            self.stop()
            raise
        return self

    def add_group(self) -> str:
        """Start one more broker group (its members, like every group's) into the running
        cluster; its name. New topics spread onto it; existing ones gain queues there by
        ``boltmq admin topic update TOPIC --groups ...``."""
        group = group_name(self.spec.groups)
        self.spec.groups += 1
        self.spec.__post_init__()  # the ports the new group takes must exist
        members = self.groups.setdefault(group, [])
        for index in range(self.spec.replicas + 1):
            members.append(self.start_member(index, group=group))
        return group

    def member_dir(self, index: int, group: str = BROKER_NAME) -> Path:
        """Data of ``group``'s member ``index`` (broker-a's directly under DATA_DIR)."""
        base = self.spec.data_dir if group == BROKER_NAME else self.spec.data_dir / group
        return base / ("store" if index == 0 else f"store-replica-{index}")

    def start_member(
        self, index: int, *, role: str | None = None, group: str = BROKER_NAME
    ) -> Member:
        """Start ``group``'s member ``index``: store, HA service and broker (again, after
        a kill)."""
        spec = self.spec
        assert self.registry is not None
        number = spec.group_names().index(group)
        first = index == 0
        data_dir = self.member_dir(index, group)
        store_role = role or (spec.master_role if first else "SLAVE")
        store_settings = (
            f"root_dir={data_dir}",
            f"flush_disk_type={spec.flush}",
            f"broker_role={store_role}",
            *spec.store_identity(number),
            *spec.store_settings,
            *spec.tls_settings("store", group),
        )
        store_port = group_port(spec.store_port, number) if first else 0
        if spec.colocated:
            return self._start_colocated(index, group, data_dir, store_settings, store_port)
        store = self._launch(
            ServiceProcess("store", self.log_dir, *store_settings, port=store_port, host=spec.host)
        )
        member = Member(index, data_dir, store, group=group)
        if spec.replicas:
            member.ha = self._launch(
                ServiceProcess(
                    "ha",
                    self.log_dir,
                    f"store_address={store.address}",
                    f"registry_addresses={self.registry.address}",
                    f"broker_name={group}",
                    *spec.ha_settings,
                    *spec.tls_settings("ha", group),
                    port=group_port(spec.ha_port, number) if first else 0,
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
                f"broker_name={group}",
                f"broker_id={index}",
                *ha_setting,
                *spec.broker_settings,
                *spec.tls_settings("broker", group),
                port=group_port(spec.broker_port, number) if first else 0,
                host=spec.host,
            )
        )
        return member

    def _start_colocated(
        self, index: int, group: str, data_dir: Path, store_settings: tuple[str, ...], port: int
    ) -> Member:
        """One process: the broker serving its store (``ClusterSpec.colocated``)."""
        spec = self.spec
        assert self.registry is not None
        number = spec.group_names().index(group)
        flags: tuple[str, ...] = ("--with-store", "--store-port", str(port))
        for setting in store_settings:
            flags += ("--store-set", setting)
        broker = self._launch(
            ServiceProcess(
                "broker",
                self.log_dir,
                f"registry_addresses={self.registry.address}",
                f"broker_name={group}",
                f"broker_id={index}",
                *spec.broker_settings,
                *spec.tls_settings("broker", group),
                port=group_port(spec.broker_port, number) if index == 0 else 0,
                host=spec.host,
                flags=flags,
            )
        )
        return Member(index, data_dir, ServedAlongside(broker, "store"), broker, group=group)

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
