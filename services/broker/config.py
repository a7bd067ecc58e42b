"""BrokerConfig: every setting of the broker, RocketMQ's names in snake_case with units.

Loaded through :func:`boltmq.kernel.config.load_config` (defaults, TOML file,
``BOLTMQ_*`` environment, flags). Validation happens in ``__post_init__`` so a
bad value is one clear error at start-up, never a surprise at run time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from boltmq.kernel.config import ConfigError, ServerSettings
from boltmq.kernel.signing import Credentials, SigningError
from boltmq.wire.topic import is_topic
from services.broker.delay.delay_level import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    InvalidDelayLevels,
    parse_delay_levels,
)

PORT_MAX = 65535
ACL_SIGNATURE_MAX_SKEW_LIMIT_MS = 60_000
"""The longest signature window a broker accepts (replays are refused by nonce within it)."""
_ADDRESS_PATTERN = re.compile(r"^[^\s:,]+:\d{1,5}$|^\[[0-9a-fA-F:.]+\]:\d{1,5}$")


@dataclass(frozen=True)
class BrokerConfig(ServerSettings):
    """Settings of one broker."""

    listen_host: str = "127.0.0.1"
    """Address the broker service binds (``0.0.0.0`` in a container)."""
    listen_port: int = 10911
    """gRPC port of the broker (0: any free port, printed in the READY line)."""
    store_address: str = "127.0.0.1:10913"
    """``host:port`` of the master store of this broker group."""
    registry_addresses: str = "127.0.0.1:9876"
    """Comma-separated ``host:port`` list; the broker registers with every one ("" for none)."""
    cluster_name: str = "DefaultCluster"
    """Cluster this broker belongs to (also a system topic)."""
    broker_name: str = "broker-a"
    """Name of the broker group (also a system topic)."""
    broker_id: int = 0
    """0 for the master of the group, > 0 for a replica."""
    advertised_address: str = ""
    """``host:port`` announced to registries and clients ("": listen host and bound port)."""
    ha_address: str = ""
    """``host:port`` of the HA service beside the store, announced to registries."""
    register_interval_ms: int = 30_000
    """How often the broker registers with every registry (also at once on topic changes)."""
    registry_timeout_ms: int = 3_000
    """Deadline of one RegisterBroker / UnregisterBroker call."""
    store_timeout_ms: int = 10_000
    """Deadline of one unary call to the store."""
    store_connect_timeout_ms: int = 30_000
    """How long start-up waits for the store to answer before giving up."""
    watch_reconnect_max_ms: int = 5_000
    """Longest pause between two attempts to reopen the store's arrival stream."""
    auto_create_topic_enable: bool = True
    """Create an unknown topic from TBW102 on its first send."""
    auto_create_subscription_group: bool = True
    """Create an unknown consumer group on its first heartbeat, pull or commit."""
    default_topic_queue_nums: int = 4
    """Queues of an auto-created topic when the producer does not ask for a number."""
    max_topic_queue_nums: int = 1024
    """Most read or write queues one topic may have (the store accepts queue ids 0..1023)."""
    offset_persist_interval_ms: int = 5_000
    """How often changed consumer offsets are written to the store (and at shutdown)."""
    client_expiry_ms: int = 120_000
    """A producer or consumer silent for this long is dropped from its groups."""
    client_scan_interval_ms: int = 10_000
    """How often silent clients are looked for."""
    long_poll_max_ms: int = 30_000
    """Longest time a pull is parked, whatever suspend timeout the client asks for."""
    long_poll_max_parked: int = 20_000
    """Pulls parked at once at most; beyond it a pull is answered at once (below
    max_concurrent_rpcs, so parked pulls never take every call slot)."""
    queue_lock_expiry_ms: int = 60_000
    """An orderly consumer's queue lock not renewed for this long is free again."""
    max_message_size_bytes: int = 4 * 1024 * 1024
    """Largest body accepted."""
    max_batch_messages: int = 4096
    """Messages in one SendMessage at most."""
    max_query_messages: int = 64
    """Messages one QueryMessageByKey returns at most."""
    role_check_interval_ms: int = 1_000
    """How often the store's role is read (a promotion or demotion re-registers at once)."""
    metadata_sync_interval_ms: int = 10_000
    """Replica side: how often the master broker's metadata is copied (docs/ha.md)."""
    slave_read_enable: bool = False
    """Master side: send consumers that are far behind to a replica (suggest_broker_id)."""
    suggest_pulling_from_slave_lag_messages: int = 100_000
    """With slave_read_enable: a consumer this many messages behind the queue's end reads
    from a replica, so catching up does not evict the master's hot pages."""
    transaction_timeout_ms: int = 6_000
    """A half message undecided for this long (since its store or its last check) is
    checked back with its producer group (RocketMQ's transactionTimeOut)."""
    transaction_check_max: int = 15
    """Checks of one half message at most; still undecided after the last one, it is
    rolled back (RocketMQ's transactionCheckMax; RocketMQ discards it)."""
    transaction_check_interval_ms: int = 60_000
    """How often undecided half messages are looked for (RocketMQ's transactionCheckInterval)."""
    transaction_decided_cache_max: int = 100_000
    """Decisions remembered to answer a repeated EndTransaction with the earlier decision."""

    acl_enable: bool = False
    """Require signed calls and check them against the ACL (docs/security.md)."""
    acl_file: str = ""
    """ACL JSON document written to the store when it holds none yet ("": none)."""
    acl_signature_max_skew_ms: int = 30_000
    """A signed call's timestamp may be this far from the broker's clock, either way (stale:
    refused); also how long each accepted nonce is remembered to refuse replays. At most
    60 s: a captured call cannot be held back longer than that."""
    acl_replay_cache_max_entries: int = 1_000_000
    """Nonces of accepted signed calls remembered at most (about 250 bytes each); when that
    many are unexpired, signed calls get RESOURCE_EXHAUSTED until some expire."""
    access_key: str = ""
    """Access key of this broker's own calls to other brokers (a replica copying its
    master's metadata: an admin account when the master enforces the ACL)."""
    secret_key: str = field(default="", repr=False)
    """Secret key of ``access_key`` (kept out of the config's repr and logs)."""
    max_concurrent_rpcs: int = 30_000
    """Calls in progress at once, parked pulls included (0: no limit); beyond it
    RESOURCE_EXHAUSTED."""
    client_request_rate_per_s: float = 20_000.0
    """Calls per second per client (access key with the ACL on, else IP address);
    beyond it RESOURCE_EXHAUSTED (0: no limit)."""
    client_request_burst: int = 40_000
    """Calls a client may make at once above its rate after being idle."""
    client_in_flight_max: int = 5_000
    """Calls of one client in progress at once, parked pulls included (0: no limit)."""
    send_stream_in_flight_max: int = 1_024
    """Sends running at once on one SendStream; a send beyond it is answered
    RESOURCE_EXHAUSTED at once (:mod:`services.broker.send.send_stream`)."""
    auto_create_max_per_call: int = 32
    """Topics and consumer groups one call may auto-create (a clustering group's heartbeat
    creates two: the group and its retry topic); beyond it INVALID_ARGUMENT (0: no cap)."""
    auto_create_max_per_client: int = 2_000
    """Topics and consumer groups one client (access key with the ACL on, else IP address)
    may auto-create since the broker started; beyond it RESOURCE_EXHAUSTED (0: no cap)."""
    auto_create_rate_per_s: float = 5.0
    """Auto-creations per second per client (token bucket); beyond it RESOURCE_EXHAUSTED
    (0: no limit)."""
    auto_create_burst: int = 200
    """Auto-creations a client may make at once after being idle (at least
    auto_create_max_per_call)."""

    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    """Delay levels 1..n (at most 18): delays with a unit (ms, s, m, h, d), growing."""
    deliver_at_max_delay_ms: int = 3 * 86_400_000
    """Latest ``deliver_at_ms`` accepted, counted from now (RocketMQ's timerMaxDelaySec)."""
    deliver_at_past_tolerance_ms: int = 1_000
    """A ``deliver_at_ms`` in the past by up to this much (clock skew) is delivered at once;
    further in the past it is refused as a mistake."""

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            parse_delay_levels(self.message_delay_level)
        except InvalidDelayLevels as exc:
            raise ConfigError(str(exc)) from None
        for name in ("cluster_name", "broker_name"):
            value = getattr(self, name)
            if not is_topic(value):  # they double as topic names (system topics)
                raise ConfigError(
                    f"{name} {value!r} may only use 1-127 letters, digits, '%', '|', '_' and '-'"
                )
        for address in (self.store_address, *self.registry_address_list):
            _check_address("store_address / registry_addresses", address)
        if self.advertised_address:
            _check_address("advertised_address", self.advertised_address)
        if not 0 <= self.listen_port <= PORT_MAX:
            raise ConfigError(f"listen_port must be between 0 and {PORT_MAX}")
        if self.broker_id < 0:
            raise ConfigError("broker_id must not be negative")
        self._check_positive()
        self._check_security()
        if not 1 <= self.default_topic_queue_nums <= self.max_topic_queue_nums:
            raise ConfigError(
                "default_topic_queue_nums must be between 1 and "
                f"max_topic_queue_nums ({self.max_topic_queue_nums})"
            )

    def _check_positive(self) -> None:
        for name in (
            "register_interval_ms",
            "registry_timeout_ms",
            "store_timeout_ms",
            "store_connect_timeout_ms",
            "watch_reconnect_max_ms",
            "offset_persist_interval_ms",
            "client_expiry_ms",
            "client_scan_interval_ms",
            "long_poll_max_ms",
            "long_poll_max_parked",
            "queue_lock_expiry_ms",
            "max_message_size_bytes",
            "max_batch_messages",
            "max_query_messages",
            "role_check_interval_ms",
            "metadata_sync_interval_ms",
            "suggest_pulling_from_slave_lag_messages",
            "deliver_at_max_delay_ms",
            "max_topic_queue_nums",
            "transaction_timeout_ms",
            "transaction_check_max",
            "transaction_check_interval_ms",
            "transaction_decided_cache_max",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")

    def _check_security(self) -> None:
        if not 0 < self.acl_signature_max_skew_ms <= ACL_SIGNATURE_MAX_SKEW_LIMIT_MS:
            raise ConfigError(
                f"acl_signature_max_skew_ms must be 1..{ACL_SIGNATURE_MAX_SKEW_LIMIT_MS}, "
                f"got {self.acl_signature_max_skew_ms}"
            )
        if self.acl_replay_cache_max_entries <= 0:
            raise ConfigError("acl_replay_cache_max_entries must be positive")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("access_key and secret_key must be set together")
        if self.access_key:
            try:
                Credentials(self.access_key, self.secret_key)
            except SigningError as exc:
                raise ConfigError(f"access_key / secret_key: {exc}") from None
        if self.send_stream_in_flight_max < 1:
            raise ConfigError(
                f"send_stream_in_flight_max must be >= 1, got {self.send_stream_in_flight_max}"
            )
        if self.max_concurrent_rpcs < 0 or self.client_in_flight_max < 0:
            raise ConfigError("max_concurrent_rpcs and client_in_flight_max must be >= 0")
        if self.max_concurrent_rpcs and self.long_poll_max_parked >= self.max_concurrent_rpcs:
            raise ConfigError(
                "long_poll_max_parked must be below max_concurrent_rpcs, or parked "
                "pulls could take every call slot"
            )
        if self.client_request_rate_per_s < 0 or self.client_request_burst < 1:
            raise ConfigError(
                "client_request_rate_per_s must be >= 0 and client_request_burst >= 1"
            )
        self._check_auto_create_limits()

    def _check_auto_create_limits(self) -> None:
        if min(self.auto_create_max_per_call, self.auto_create_max_per_client) < 0:
            raise ConfigError(
                "auto_create_max_per_call and auto_create_max_per_client must be >= 0"
            )
        if self.auto_create_rate_per_s < 0:
            raise ConfigError("auto_create_rate_per_s must be >= 0")
        if self.auto_create_rate_per_s and not (
            1 <= self.auto_create_max_per_call <= self.auto_create_burst
        ):
            raise ConfigError(
                "with auto_create_rate_per_s on, auto_create_max_per_call must be between 1 "
                "and auto_create_burst, or a larger call could never be granted"
            )

    @property
    def registry_address_list(self) -> tuple[str, ...]:
        """The registries, parsed from ``registry_addresses``."""
        return tuple(a.strip() for a in self.registry_addresses.split(",") if a.strip())


def _check_address(name: str, address: str) -> None:
    if not _ADDRESS_PATTERN.fullmatch(address):
        raise ConfigError(f"{name}: expected host:port, got {address!r}")
