"""MqttConfig: every setting of one MQTT gateway process (docs/mqtt.md).

Loaded like every service's config (:func:`boltmq.kernel.config.load_config`: defaults,
TOML file, ``BOLTMQ_*`` environment, flags). The shared ``tls_*`` settings mean what
they mean elsewhere: ``tls_cert_file``/``tls_key_file`` (and ``tls_client_ca_file`` for
device certificates) turn on the TLS listener on ``tls_listen_port``; ``tls_ca_file``
and ``tls_client_cert_file``/``tls_client_key_file`` are the gateway's own calls to the
cluster (the SDK's ``tls=``).
"""

from __future__ import annotations

from dataclasses import dataclass

from boltmq.kernel.config import ConfigError, ServerSettings

PORT_MAX = 65535
MQTT_PACKET_MAX = 268_435_455
"""The largest packet the protocol can frame (a 4-byte remaining length)."""


@dataclass(frozen=True)
class MqttConfig(ServerSettings):
    """Settings of one gateway pod; pods share nothing but the cluster they talk to."""

    listen_host: str = "127.0.0.1"
    """Address the MQTT listeners bind (``0.0.0.0`` in a container)."""
    listen_port: int = 1883
    """Plain MQTT over TCP (0: any free port, printed in the READY line)."""
    tls_listen_port: int = 8883
    """MQTT over TLS, on only when ``tls_cert_file`` is set (0: any free port)."""
    ws_listen_port: int = 8083
    """MQTT over WebSocket (subprotocol ``mqtt``, any path; TLS when ``tls_cert_file`` is
    set); -1: off, 0: any free port."""
    registry: str = "127.0.0.1:9876"
    """The cluster's registries, ``host:port[,host:port...]``."""
    access_key: str = ""
    """The gateway's own ACL account (its fan-out readers, sessions and retained
    messages); "" while the brokers' ACL is off."""
    secret_key: str = ""
    """Secret of ``access_key``."""
    pod_id: str = ""
    """This pod's name in logs ("": host name and process id)."""
    max_packet_bytes: int = 262_144
    """Largest packet a device may send (announced in CONNACK); larger: DISCONNECT 0x95."""
    max_subscriptions: int = 100
    """Topic filters one session may hold; more: SUBACK 0x97 (quota exceeded)."""
    max_queued_messages: int = 1_000
    """Messages waiting for one slow device: QoS 0 past it are dropped, QoS 1 past it
    close the connection with 0x97 (a persistent session gets them again)."""
    receive_maximum: int = 100
    """QoS 1 publishes of one device unacknowledged at once (CONNACK Receive Maximum)."""
    max_connections: int = 100_000
    """Connections held at once; more are refused with CONNACK 0x89 (server busy)."""
    connect_timeout_ms: int = 10_000
    """A connection that sends no complete CONNECT within this is closed."""
    session_expiry_max_s: int = 7 * 24 * 3600
    """Longest session expiry a device may ask for (CONNACK tells the one granted)."""
    sdk_threads: int = 16
    """Threads making the SDK's (blocking) calls for every device together."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("listen_port", "tls_listen_port"):
            if not 0 <= getattr(self, name) <= PORT_MAX:
                raise ConfigError(f"{name} must be between 0 and {PORT_MAX}")
        if not -1 <= self.ws_listen_port <= PORT_MAX:
            raise ConfigError(f"ws_listen_port must be between -1 (off) and {PORT_MAX}")
        if not self.registry.strip():
            raise ConfigError("registry must name at least one registry host:port")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("access_key and secret_key must be set together")
        if not 64 <= self.max_packet_bytes <= MQTT_PACKET_MAX:
            raise ConfigError(f"max_packet_bytes must be between 64 and {MQTT_PACKET_MAX}")
        if not 1 <= self.receive_maximum <= 65_535:
            raise ConfigError("receive_maximum must be between 1 and 65535")
        for name in (
            "max_subscriptions",
            "max_queued_messages",
            "max_connections",
            "connect_timeout_ms",
            "sdk_threads",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.session_expiry_max_s < 0:
            raise ConfigError("session_expiry_max_s must be >= 0")
