"""Configuration loading shared by every service.

Each service has one frozen dataclass with unit-suffixed fields and a default
per field. :func:`load_config` builds it in one order: defaults, then a TOML
file, then ``BOLTMQ_<FIELD>`` environment variables, then explicit overrides
(command-line flags). Nothing else in BoltMQ reads ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ENV_PREFIX = "BOLTMQ_"

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type."""


def _coerce(name: str, kind: Any, value: Any) -> Any:
    """Convert a file/env/flag value to the field's declared type."""
    origin = typing.get_origin(kind)
    if origin is typing.Union or origin is getattr(__import__("types"), "UnionType", None):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if value is None or value == "":
            return None
        kind = args[0]
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected a boolean, got {value!r}")
    if kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from exc
    if kind is float:
        try:
            return float(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: expected a number, got {value!r}") from exc
    if kind is str:
        return str(value)
    if kind is Path:
        return Path(str(value)).expanduser()
    return value


def load_config(
    cls: type[T],
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """Build ``cls`` from defaults, ``file`` (TOML), ``BOLTMQ_*`` env and overrides.

    ``env`` defaults to the process environment; tests pass their own mapping.
    Unknown keys in the file or overrides are errors, so typos never pass silently.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    values: dict[str, Any] = {}
    if file is not None:
        path = Path(file)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        unknown = set(data) - fields
        if unknown:
            raise ConfigError(f"config file {path}: unknown settings {sorted(unknown)}")
        values.update(data)
    source = os.environ if env is None else env
    for name in fields:
        key = ENV_PREFIX + name.upper()
        if key in source:
            values[name] = source[key]
    if overrides:
        unknown = set(overrides) - fields
        if unknown:
            raise ConfigError(f"unknown settings {sorted(unknown)}")
        values.update({k: v for k, v in overrides.items() if v is not None})
    coerced = {name: _coerce(name, hints[name], value) for name, value in values.items()}
    return cls(**coerced)


LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class ServerSettings:
    """Settings every service shares: shutdown, telemetry, logs and TLS (docs/operations.md).

    Each service's config dataclass inherits these, so ``BOLTMQ_METRICS_PORT``,
    ``BOLTMQ_TLS_CERT_FILE`` and the rest mean the same thing for the store,
    the broker, the registry and the HA service. Subclasses that define their
    own ``__post_init__`` call ``super().__post_init__()``.
    """

    shutdown_grace_ms: int = 10_000
    """How long a SIGTERM waits for in-flight calls before they are cancelled."""
    metrics_port: int = 0
    """Port of the Prometheus scrape endpoint (0: no endpoint)."""
    health_port: int = 0
    """Port of a plaintext listener with only the gRPC health service, for probes that
    cannot speak the service port's TLS (0: none)."""
    health_host: str = ""
    """Host the health listener binds ("": the service's listen host); a service bound to
    loopback sets the pod's wildcard here so the kubelet's probes still reach it."""
    metrics_host: str = ""
    """Host the metrics endpoint binds ("": the service's listen host)."""
    reflection: bool = True
    """Serve gRPC reflection on the service port (grpcurl lists the methods); production
    turns it off on ports applications reach."""
    log_format: str = "text"
    """``text`` (one line per record) or ``json`` (one object per line, with trace ids)."""
    trace_file: str = ""
    """Append every finished span to this file as one JSON line ("": none; tests, debugging)."""
    tls_cert_file: str = ""
    """PEM certificate chain this server presents ("": plaintext)."""
    tls_key_file: str = ""
    """PEM private key of ``tls_cert_file``."""
    tls_client_ca_file: str = ""
    """PEM CA bundle; when set, callers must present a certificate it signed (mutual TLS)."""
    tls_ca_file: str = ""
    """PEM CA bundle this service trusts when it calls other services ("": plaintext calls)."""
    tls_client_cert_file: str = ""
    """PEM certificate this service presents when it calls others (mutual TLS)."""
    tls_client_key_file: str = ""
    """PEM private key of ``tls_client_cert_file``."""
    tls_internal_ca_file: str = ""
    """PEM bundle of the internal CA that issues component certificates: callers it issued
    are trusted by the port too, and internal RPCs accept only them (docs/security.md)."""
    tls_internal_crl_file: str = ""
    """PEM CRLs the internal CA signed: component certificates they list are refused on
    every internal port; read again within a second of a change (boltmq/kernel/revocation.py)."""
    allow_unauthenticated_internal: bool = False
    """Let a TLS service with internal RPCs start without ``tls_internal_ca_file``, so
    any caller the handshake accepts may make its internal calls (logged at every start)."""

    def __post_init__(self) -> None:
        if self.shutdown_grace_ms < 0:
            raise ConfigError("shutdown_grace_ms must be >= 0")
        for name in ("metrics_port", "health_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(f"{name} must be between 0 and 65535")
        if self.health_port and self.health_port == self.metrics_port:
            raise ConfigError("health_port and metrics_port must differ")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(
                f"log_format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("tls_cert_file and tls_key_file must be set together")
        if bool(self.tls_client_cert_file) != bool(self.tls_client_key_file):
            raise ConfigError("tls_client_cert_file and tls_client_key_file must be set together")
        for name in ("tls_client_ca_file", "tls_internal_ca_file"):
            if getattr(self, name) and not self.tls_cert_file:
                raise ConfigError(f"{name} (mutual TLS) needs tls_cert_file")
        if self.tls_internal_crl_file and not self.tls_internal_ca_file:
            raise ConfigError(
                "tls_internal_crl_file needs tls_internal_ca_file (the CA it revokes for)"
            )


@dataclass(frozen=True)
class CallerLimitSettings(ServerSettings):
    """Per-caller limits of the store, HA service and registry (docs/security.md, Limits).

    A caller is its component identity when the internal gate is on (its client
    certificate from the internal CA), else its IP address. Streams count as
    calls in flight for as long as they stay open. The defaults are far above
    what the cluster's own components use (the broker keeps a few streams open
    on its store, a replica one on its master's HA service), so only a flood
    meets them.
    """

    caller_request_rate_per_s: float = 20_000.0
    """Calls per second per caller (token bucket); beyond it RESOURCE_EXHAUSTED (0: no limit)."""
    caller_request_burst: int = 40_000
    """Calls a caller may make at once above its rate after being idle."""
    caller_in_flight_max: int = 5_000
    """Calls and open streams of one caller at once; beyond it RESOURCE_EXHAUSTED (0: no
    limit)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("caller_request_rate_per_s", "caller_request_burst", "caller_in_flight_max"):
            value = getattr(self, name)
            if not value >= 0:  # NaN too
                raise ConfigError(f"{name} must be >= 0 (0: no limit), got {value:g}")
        if self.caller_request_rate_per_s and self.caller_request_burst < 1:
            raise ConfigError(
                "caller_request_burst must be >= 1 while caller_request_rate_per_s is on "
                "(a burst of 0 would refuse every call)"
            )
