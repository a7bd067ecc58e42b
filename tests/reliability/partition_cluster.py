"""The partition suite's cluster: every member of every group, each registry and each etcd
member on its own "host" (a network namespace of :class:`tests.reliability.netns.Network`).

Hosts: ``e0``..``e2`` (a 3-member etcd, Debian's ``etcd-server``), ``r0`` and ``r1``
(registries), ``<group><i>`` (``a0``, ``a1``, ``b0``, ``b1``: member ``i`` of broker
group ``broker-<group>``: its store, HA service and broker) and ``c`` (the clients,
:mod:`tests.reliability.partition_client`). Every namespace has its own ports, so
each service listens on a fixed port of its host's address and a restarted one
comes back where it was. Member 0 starts as SYNC_MASTER; the others are replicas
promoted as SYNC_MASTER; the controller (etcd) elects the masters.

Roles are read from the stores' own ``<root>/ha/role.json`` files, and the etcd
leader from etcd's status endpoint, asked from inside the namespace.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from boltmq.cli.dev.launcher import REPO_ROOT, ServiceProcess
from services.store.role import MASTER_ROLES
from tests.conftest import DISK_RATIOS_OFF_SETTINGS
from tests.reliability.netns import Network

GROUPS = ("a", "b")
REPLICAS = 1
ETCD_HOSTS = ("e0", "e1", "e2")
REGISTRY_HOSTS = ("r0", "r1")
CLIENT_HOST = "c"
LEASE_MS = 2_000
PORTS = {"registry": 9876, "broker": 10911, "store": 10912, "ha": 10913}
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
STORE_SETTINGS = (
    "mapped_file_size_commitlog=1048576",
    "mapped_file_size_consume_queue=60000",
    "max_hash_slot_num=1000",
    "max_index_num=4000",
    "slave_timeout_ms=2000",
    "promoted_broker_role=SYNC_MASTER",
    *DISK_RATIOS_OFF_SETTINGS,
)
HA_SETTINGS = (
    f"controller_lease_ms={LEASE_MS}",
    "heartbeat_interval_ms=300",
    "housekeeping_interval_ms=3000",
    "role_check_interval_ms=200",
    "reconnect_min_ms=100",
    "reconnect_max_ms=1000",
)
BROKER_SETTINGS = ("role_check_interval_ms=200", "metadata_sync_interval_ms=1000")


def member_hosts() -> list[str]:
    return [f"{g}{i}" for g in GROUPS for i in range(REPLICAS + 1)]


def all_hosts() -> list[str]:
    return [*ETCD_HOSTS, *REGISTRY_HOSTS, *member_hosts(), CLIENT_HOST]


@dataclass
class Member:
    """A store, its HA service and its broker on one host."""

    host: str
    group: str
    index: int
    root: Path
    processes: list[ServiceProcess] = field(default_factory=list)

    @property
    def broker_name(self) -> str:
        return f"broker-{self.group}"

    def role(self) -> tuple[str, int]:
        """(broker_role, epoch) as the store last saved it."""
        path = self.root / "ha" / "role.json"
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            return ("", 0)  # never changed: the controller has elected nobody yet
        return str(saved["broker_role"]), int(saved["epoch"])

    def epochs(self) -> list[tuple[int, int]]:
        saved = json.loads((self.root / "ha" / "role.json").read_text())
        return [(int(e), int(s)) for e, s in saved["epochs"]]


class PartitionCluster:
    """Namespaces, etcd, registries, members and the client process (module docstring)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.logs = base / "logs"
        self.net = Network(all_hosts())
        self.etcd: dict[str, subprocess.Popen[bytes]] = {}
        self.registries: list[ServiceProcess] = []
        self.members = [Member(h, h[0], int(h[1:]), base / "stores" / h) for h in member_hosts()]
        self.client: subprocess.Popen[str] | None = None

    def address(self, host: str, port: int) -> str:
        return f"{self.net.addresses[host]}:{port}"

    @property
    def registry_addresses(self) -> str:
        return ",".join(self.address(h, PORTS["registry"]) for h in REGISTRY_HOSTS)

    @property
    def etcd_endpoints(self) -> str:
        return ",".join(self.address(h, ETCD_CLIENT_PORT) for h in ETCD_HOSTS)

    # ------------------------------------------------------------------ etcd
    def start_etcd(self, host: str, state: str = "new") -> None:
        ip = self.net.addresses[host]
        peers = ",".join(f"{h}=http://{self.net.addresses[h]}:{ETCD_PEER_PORT}" for h in ETCD_HOSTS)
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"etcd-{host}.log").open("ab") as log:
            self.etcd[host] = subprocess.Popen(
                [
                    *self.net.exec_prefix(host),
                    shutil.which("etcd") or "etcd",
                    f"--name={host}",
                    f"--data-dir={self.base / 'etcd' / host}",
                    f"--listen-client-urls=http://{ip}:{ETCD_CLIENT_PORT}",
                    f"--advertise-client-urls=http://{ip}:{ETCD_CLIENT_PORT}",
                    f"--listen-peer-urls=http://{ip}:{ETCD_PEER_PORT}",
                    f"--initial-advertise-peer-urls=http://{ip}:{ETCD_PEER_PORT}",
                    f"--initial-cluster={peers}",
                    f"--initial-cluster-state={state}",
                    f"--initial-cluster-token={self.net.tag}",
                    "--heartbeat-interval=100",
                    "--election-timeout=1000",
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def etcd_status(self, host: str) -> dict[str, object] | None:
        """etcd's maintenance status of member ``host`` (None when it does not answer)."""
        url = f"http://{self.address(host, ETCD_CLIENT_PORT)}/v3/maintenance/status"
        ask = (
            "import urllib.request\n"
            "try:\n"
            f"    print(urllib.request.urlopen({url!r}, b'{{}}', timeout=2).read().decode())\n"
            "except OSError:\n"
            "    pass\n"
        )
        result = subprocess.run(
            [*self.net.exec_prefix(host), sys.executable, "-c", ask],
            capture_output=True,
            text=True,
            timeout=20,
        )
        try:
            status: dict[str, object] = json.loads(result.stdout)
        except ValueError:
            return None
        return status if "leader" in status else None

    def etcd_leader(self) -> str | None:
        for host in ETCD_HOSTS:
            status = self.etcd_status(host)
            if status is not None:
                header = status.get("header")
                member = header.get("member_id") if isinstance(header, dict) else None
                if member is not None and member == status["leader"]:
                    return host
        return None

    def wait_etcd(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while self.etcd_leader() is None:
            if time.monotonic() > deadline:
                raise TimeoutError("etcd elected no leader")
            time.sleep(0.3)

    # ------------------------------------------------------------------ services
    def _service(self, where: str | Member, service: str, *settings: str) -> ServiceProcess:
        """Start ``service`` on a host (a member's: recorded among its processes)."""
        host = where.host if isinstance(where, Member) else where
        process = ServiceProcess(
            service,
            self.logs,
            *settings,
            port=PORTS[service],
            host=self.net.addresses[host],
            prefix=self.net.exec_prefix(host),
        )
        if isinstance(where, Member):
            where.processes.append(process)
        elif service == "registry":
            self.registries.append(process)
        return process.start()

    def start_member(self, member: Member) -> None:
        """Start (or restart) a member's store, HA service and broker."""
        ip = self.net.addresses[member.host]
        role = "SYNC_MASTER" if member.index == 0 else "SLAVE"
        for old in member.processes:  # a restart: the killed ones reaped, their pipes closed
            old.stop(0)
        member.processes = []  # each one as it starts: a failed start leaks none
        store = self._service(
            member,
            "store",
            f"root_dir={member.root}",
            f"broker_role={role}",
            f"store_host={ip}",
            f"store_port={PORTS['broker'] + GROUPS.index(member.group)}",
            *STORE_SETTINGS,
        )
        ha = self._service(
            member,
            "ha",
            f"store_address={store.address}",
            f"registry_addresses={self.registry_addresses}",
            f"broker_name={member.broker_name}",
            f"controller_endpoints={self.etcd_endpoints}",
            *HA_SETTINGS,
        )
        self._service(
            member,
            "broker",
            f"store_address={store.address}",
            f"registry_addresses={self.registry_addresses}",
            f"broker_name={member.broker_name}",
            f"broker_id={member.index}",
            f"ha_address={ha.address}",
            *BROKER_SETTINGS,
        )

    def start(self) -> PartitionCluster:
        """etcd and the registries first, then every member at once (one thread each)."""
        for host in ETCD_HOSTS:
            self.start_etcd(host)
        with ThreadPoolExecutor(len(self.members)) as pool:
            registries = [pool.submit(self._service, h, "registry") for h in REGISTRY_HOSTS]
            self.wait_etcd()
            for registry in registries:
                registry.result()
            for started in [pool.submit(self.start_member, m) for m in self.members]:
                started.result()
        return self

    def start_client(self, out: Path) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self._client_log = (self.logs / "client.log").open("w")
        self.client = subprocess.Popen(
            [
                *self.net.exec_prefix(CLIENT_HOST),
                sys.executable,
                "-m",
                "tests.reliability.partition_client",
                str(out),
                self.registry_addresses,
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=self._client_log,
            text=True,
            start_new_session=True,
        )
        assert self.client.stdout is not None
        line = self.client.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(
                f"the client did not start: {(self.logs / 'client.log').read_text()}"
            )

    # ------------------------------------------------------------------ roles
    def group(self, group: str) -> list[Member]:
        return [m for m in self.members if m.group == group]

    def master_of(self, group: str) -> Member | None:
        """The member whose store is a master of the highest epoch (None: none now)."""
        masters = [m for m in self.group(group) if m.role()[0] in MASTER_ROLES]
        return max(masters, key=lambda m: m.role()[1]) if masters else None

    def wait_masters(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while any(self.master_of(g) is None for g in GROUPS):
            if time.monotonic() > deadline:
                raise TimeoutError("a group has no master")
            time.sleep(0.3)

    # ------------------------------------------------------------------ teardown
    def stop(self) -> None:
        """Stop the client, the services and etcd; then delete the namespaces."""
        try:
            if self.client is not None:
                if self.client.poll() is None:
                    self.client.kill()
                    self.client.wait()
                assert self.client.stdout is not None
                self.client.stdout.close()
                self._client_log.close()
            for member in self.members:
                for proc in reversed(member.processes):
                    if proc.alive():
                        proc.resume()  # a paused process cannot stop
                    proc.stop()
            for registry in self.registries:
                registry.stop()
            for proc in self.etcd.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        finally:
            self.net.close()
