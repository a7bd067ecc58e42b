"""HAConfig: every setting of one HA service process (see docs/ha.md).

Loaded through :func:`boltmq.kernel.config.load_config` (defaults, TOML file,
``BOLTMQ_*`` environment, flags). Validation happens in ``__post_init__`` so a
bad value is one clear error at start-up, never a surprise at run time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from boltmq.kernel.config import CallerLimitSettings, ConfigError
from boltmq.wire.topic import is_topic

PORT_MAX = 65535
REPLICA_START_MODES = ("LAST_SEGMENT", "FIRST_SEGMENT")
_ADDRESS_PATTERN = re.compile(r"^[^\s:,]+:\d{1,5}$|^\[[0-9a-fA-F:.]+\]:\d{1,5}$")
CONTROLLER_LEASE_MIN_MS = 2_000
"""etcd grants no lease shorter than its own minimum TTL (about 1.5 election timeouts)."""
CONTROLLER_LEASE_MAX_MS = 600_000
CONTROLLER_PREFIX_PATTERN = re.compile(r"^/[A-Za-z0-9_.\-/]*[A-Za-z0-9_.\-]$")
MAX_CHUNK_BYTES_LIMIT = 32 * 1024 * 1024
"""The store's own ceiling for one ReadCommitLog chunk."""


@dataclass(frozen=True)
class HAConfig(CallerLimitSettings):
    """Settings of one HA service, the process beside one store (either role)."""

    listen_host: str = "127.0.0.1"
    """Address the HA service binds (``0.0.0.0`` in a container)."""
    listen_port: int = 10912
    """gRPC port of the HA service (0: any free port, printed in the READY line)."""
    advertised_address: str = ""
    """``host:port`` this HA service names itself with ("": listen host and bound port)."""
    store_address: str = "127.0.0.1:10913"
    """``host:port`` of the store beside this HA service (the only store it touches)."""
    registry_addresses: str = ""
    """Comma-separated registries; a replica finds its master's HA address there."""
    cluster_name: str = "DefaultCluster"
    """Cluster of the broker group this store belongs to (registry look-up)."""
    broker_name: str = "broker-a"
    """Broker group of this store; its master is the live broker with id 0 of this name."""
    master_address: str = ""
    """Static ``host:port`` of the master's HA service; overrides the registry look-up."""
    replica_start: str = "LAST_SEGMENT"
    """Where an empty replica starts: the master's LAST_SEGMENT or its FIRST_SEGMENT (full copy)."""
    max_chunk_bytes: int = 4 * 1024 * 1024
    """Largest CommitLog chunk sent to a replica (chunks never cross a segment anyway)."""
    heartbeat_interval_ms: int = 5_000
    """Silence after which either side sends a heartbeat (an empty chunk, a report)."""
    housekeeping_interval_ms: int = 20_000
    """A stream silent this long is closed (master: no report; replica: no chunk)."""
    role_check_interval_ms: int = 1_000
    """How often the store's role is read (a promotion stops the follower within this)."""
    store_timeout_ms: int = 10_000
    """Deadline of one unary call to the store."""
    registry_timeout_ms: int = 3_000
    """Deadline of one registry look-up."""
    reconnect_min_ms: int = 100
    """First pause before a replica reconnects after a failed attempt; it doubles from here."""
    reconnect_max_ms: int = 5_000
    """Longest pause between two reconnect attempts."""
    unacked_chunks_max: int = 4_096
    """Master: chunks sent but not yet acknowledged by a replica before sending pauses."""
    controller_endpoints: str = ""
    """Comma-separated etcd ``host:port`` endpoints: the group elects its master there
    (docs/ha.md, "Automatic failover"). Empty: no controller, roles change only by hand."""
    controller_lease_ms: int = 3_000
    """TTL of the master's etcd lease, whole seconds: a dead master is replaced about this
    long after it stops; a live master cut off from etcd fences itself well within it."""
    controller_prefix: str = "/boltmq"
    """etcd key prefix of the controller's keys (``<prefix>/<cluster>/<group>/...``)."""
    controller_username: str = ""
    """etcd user the controller authenticates as, where etcd's authentication is on (give
    it read and write on ``<prefix>/`` only). Empty: no authentication."""
    controller_password_file: str = ""
    """File whose first line is that user's password (a mounted Secret); needed with
    ``controller_username``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.listen_port <= PORT_MAX:
            raise ConfigError(f"listen_port must be between 0 and {PORT_MAX}")
        for name in ("cluster_name", "broker_name"):
            value = getattr(self, name)
            if not is_topic(value):  # they double as topic names (system topics)
                raise ConfigError(
                    f"{name} {value!r} may only use 1-127 letters, digits, '%', '|', '_' and '-'"
                )
        _check_address("store_address", self.store_address)
        for address in self.registry_address_list:
            _check_address("registry_addresses", address)
        for name in ("advertised_address", "master_address"):
            if getattr(self, name):
                _check_address(name, getattr(self, name))
        if self.replica_start not in REPLICA_START_MODES:
            raise ConfigError(
                f"replica_start must be one of {REPLICA_START_MODES}, got {self.replica_start!r}"
            )
        if not 1 <= self.max_chunk_bytes <= MAX_CHUNK_BYTES_LIMIT:
            raise ConfigError(f"max_chunk_bytes must be between 1 and {MAX_CHUNK_BYTES_LIMIT}")
        for name in (
            "heartbeat_interval_ms",
            "housekeeping_interval_ms",
            "role_check_interval_ms",
            "store_timeout_ms",
            "registry_timeout_ms",
            "reconnect_min_ms",
            "reconnect_max_ms",
            "unacked_chunks_max",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.reconnect_max_ms < self.reconnect_min_ms:
            raise ConfigError("reconnect_max_ms must not be below reconnect_min_ms")
        self._check_controller()
        if self.housekeeping_interval_ms <= self.heartbeat_interval_ms:
            # Otherwise a healthy but idle stream would be closed between two heartbeats.
            raise ConfigError("housekeeping_interval_ms must exceed heartbeat_interval_ms")

    def _check_controller(self) -> None:
        for address in self.controller_endpoint_list:
            _check_address("controller_endpoints", address)
        if not self.controller_endpoint_list:
            return
        if self.master_address:
            raise ConfigError(
                "master_address and controller_endpoints exclude each other: the controller "
                "elects the master, a static master_address would outlive a failover"
            )
        if not self.registry_address_list:
            raise ConfigError(
                "controller_endpoints needs registry_addresses: a replica finds the elected "
                "master's HA service through the registries"
            )
        lease_ms = self.controller_lease_ms
        if lease_ms % 1000 or not CONTROLLER_LEASE_MIN_MS <= lease_ms <= CONTROLLER_LEASE_MAX_MS:
            raise ConfigError(
                f"controller_lease_ms must be whole seconds between {CONTROLLER_LEASE_MIN_MS} "
                f"and {CONTROLLER_LEASE_MAX_MS} (an etcd lease TTL), got {lease_ms}"
            )
        self.controller_credentials()  # a missing or empty password file: refused at start
        if not CONTROLLER_PREFIX_PATTERN.fullmatch(self.controller_prefix):
            raise ConfigError(
                "controller_prefix must start with '/', not end with one, and use only "
                f"letters, digits, '/', '_', '.' and '-', got {self.controller_prefix!r}"
            )

    def controller_credentials(self) -> tuple[str, str] | None:
        """(user, password) for etcd, read from ``controller_password_file``; None without
        ``controller_username``. ConfigError when only one is given or the file holds no
        password."""
        user, path = self.controller_username, self.controller_password_file
        if not user and not path:
            return None
        if not user or not path:
            raise ConfigError(
                "controller_username and controller_password_file go together: etcd "
                "authenticates a user by its password"
            )
        try:
            with open(path, encoding="utf-8") as file:
                password = file.readline().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(
                f"controller_password_file {path!r} cannot be read: {exc.strerror}"
            ) from None
        if not password:
            raise ConfigError(f"controller_password_file {path!r} holds no password")
        return user, password

    @property
    def controller_endpoint_list(self) -> tuple[str, ...]:
        """The etcd endpoints, parsed from ``controller_endpoints``."""
        return tuple(a.strip() for a in self.controller_endpoints.split(",") if a.strip())

    @property
    def registry_address_list(self) -> tuple[str, ...]:
        """The registries, parsed from ``registry_addresses``."""
        return tuple(a.strip() for a in self.registry_addresses.split(",") if a.strip())


def _check_address(name: str, address: str) -> None:
    if not _ADDRESS_PATTERN.fullmatch(address):
        raise ConfigError(f"{name}: expected host:port, got {address!r}")
