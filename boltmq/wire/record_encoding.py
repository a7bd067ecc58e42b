"""RecordEncoding: the sections of a CommitLog record as its writers encode them.

The record's layout is documented (and decoded) in :mod:`boltmq.wire.record`;
this module writes the parts a writer builds before it packs the head: the
topic field and its magic, the properties section (``key\\x01value\\x02`` per
pair, tags and keys folded in as ``TAGS`` and ``KEYS``), the tail that holds
both, the hosts and the sys-flag bits their size implies, and the blank
marker that ends a segment. Every function refuses what no reader could take
back with :class:`~boltmq.wire.record.InvalidMessage`.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping

from boltmq.wire.record import (
    BLANK,
    INT,
    KEY_SEPARATOR,
    LONG_TOPIC_MAX_BYTES,
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    MAGIC_MESSAGE_LONG_TOPIC,
    MAX_PROPERTIES_BYTES,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    SHORT,
    SHORT_TOPIC_MAX_BYTES,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_STORE_HOST_V6,
    InvalidMessage,
)

# --------------------------------------------------------------------------- topic and tail


def encode_topic(topic: str) -> tuple[bytes, int]:
    """``(topic length field + topic bytes, magic)`` choosing the long-topic form (the last
    few remembered: a store checks every append's topic, many a call of many topics)."""
    if type(topic) is str:
        return _encoded_topic(topic)
    return _encode_topic(topic)


@functools.lru_cache(maxsize=4096)
def _encoded_topic(topic: str) -> tuple[bytes, int]:
    return _encode_topic(topic)


def _encode_topic(topic: str) -> tuple[bytes, int]:
    raw = _utf8(topic, "topic")
    if len(raw) <= SHORT_TOPIC_MAX_BYTES:
        return bytes((len(raw),)) + raw, MAGIC_MESSAGE
    if len(raw) > LONG_TOPIC_MAX_BYTES:
        raise InvalidMessage(f"topic is {len(raw)} bytes, at most {LONG_TOPIC_MAX_BYTES}")
    return SHORT.pack(len(raw)) + raw, MAGIC_MESSAGE_LONG_TOPIC


def encode_tail(topic_field: bytes, properties_raw: bytes) -> bytes:
    """Topic and properties sections, which follow the body."""
    if len(properties_raw) > MAX_PROPERTIES_BYTES:
        raise InvalidMessage(
            f"properties are {len(properties_raw)} bytes, at most {MAX_PROPERTIES_BYTES}"
        )
    return topic_field + SHORT.pack(len(properties_raw)) + properties_raw


def blank_marker(remaining: int) -> bytes:
    """The end-of-segment marker: total_size = bytes left, blank magic."""
    return BLANK.pack(remaining, MAGIC_BLANK)


# --------------------------------------------------------------------------- properties


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """``key\\x01value\\x02`` for every pair, UTF-8; InvalidMessage on separators."""
    if not properties:
        return b""
    parts = []
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidMessage(f"property {key!r} must map a string to a string")
        if not key:
            raise InvalidMessage("property names must not be empty")
        for text in (key, value):
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                raise InvalidMessage(f"property {key!r} contains a \\x01 or \\x02 separator")
        parts.append(f"{key}\x01{value}\x02")
    return _utf8("".join(parts), "properties")


def message_properties(
    tags: str | None, keys: Iterable[str] | None, properties: Mapping[str, str] | None
) -> dict[str, str]:
    """Fold tags and keys into the property map, validating them."""
    merged = dict(properties) if properties else {}
    if tags:
        merged[PROPERTY_TAGS] = tags
    if keys:
        key_list = list(keys)
        for key in key_list:
            if not key or KEY_SEPARATOR in key:
                raise InvalidMessage(f"message key {key!r} must be non-empty without spaces")
        merged[PROPERTY_KEYS] = KEY_SEPARATOR.join(key_list)
    return merged


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise InvalidMessage(
            f"{what} is not valid text: {exc.reason} at character {exc.start}"
        ) from None


# --------------------------------------------------------------------------- hosts


def encode_host(host: str, port: int) -> bytes:
    """Address bytes (4 or 16) + int32 port."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError as exc:
        raise InvalidMessage(f"host {host!r} is not an IP address") from exc
    if not 0 <= port <= 0x7FFFFFFF:
        raise InvalidMessage(f"port {port} out of range")
    return addr.packed + INT.pack(port)


def host_sys_flags(born_host: bytes, store_host: bytes) -> int:
    """The IPv6 sys-flag bits implied by the encoded hosts."""
    flags = 0
    if len(born_host) == 20:
        flags |= SYS_FLAG_BORN_HOST_V6
    if len(store_host) == 20:
        flags |= SYS_FLAG_STORE_HOST_V6
    return flags
