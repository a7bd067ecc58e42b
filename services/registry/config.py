"""RegistryConfig: every setting of one name registry.

Loaded through :func:`boltmq.kernel.config.load_config` (defaults, TOML file,
``BOLTMQ_*`` environment, flags). Validation happens in ``__post_init__`` so a
bad value is one clear error at start-up, never a surprise at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from boltmq.kernel.config import CallerLimitSettings, ConfigError

PORT_MAX = 65535


@dataclass(frozen=True)
class RegistryConfig(CallerLimitSettings):
    """Settings of one registry process; registries share nothing, so each has its own."""

    listen_host: str = "127.0.0.1"
    """Address the registry service binds (``0.0.0.0`` in a container)."""
    listen_port: int = 9876
    """gRPC port of the registry (0: any free port, printed in the READY line)."""
    broker_expiry_ms: int = 120_000
    """A broker silent for longer than this is dropped together with its routes."""
    scan_interval_ms: int = 5_000
    """How often the background task drops expired brokers (reads also skip them at once)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.listen_port <= PORT_MAX:
            raise ConfigError(f"listen_port must be between 0 and {PORT_MAX}")
        if self.broker_expiry_ms <= 0:
            raise ConfigError("broker_expiry_ms must be positive")
        if self.scan_interval_ms <= 0:
            raise ConfigError("scan_interval_ms must be positive")
