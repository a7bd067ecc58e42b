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
