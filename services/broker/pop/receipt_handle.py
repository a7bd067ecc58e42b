"""Receipt handles: the opaque string a POP delivery is acked or changed with.

A handle is the URL-safe base64 (no padding) of 53 bytes, big-endian:

Offset | Size | Field
-------+------+-----------------------------------------------------------------
0      | 1    | version (HANDLE_VERSION, 0x01)
1      | 4    | queue_id
5      | 8    | queue_offset (the message's offset in its consume queue)
13     | 8    | commitlog_offset (where the message lies)
21     | 8    | token (the delivery's: :mod:`services.broker.metadata.pop_state`)
29     | 8    | visible_at_ms (when this delivery's invisibility ends, ms since the epoch)
37     | 16   | mac: HMAC-SHA256, first 16 bytes, over bytes 0..36 followed by the UTF-8 of
       |      | ``broker_name NUL group NUL topic``, keyed with the broker's POP secret

The group and topic are not in the handle but in its MAC: a handle is good only with the
group and topic it was issued for, on the broker group that issued it (replicas share the
secret), so a client cannot forge one or carry one to another queue or group. A handle that
does not decode or whose MAC does not match is :class:`ReceiptHandleInvalid`; one that
decodes but whose delivery is over (acked, dead-lettered, or received again after its
invisible time) is the service's :class:`~services.broker.errors.ReceiptHandleStale`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final

from services.broker.errors import ReceiptHandleInvalid

HANDLE_VERSION: Final = 1
_BODY = struct.Struct(">BiqqQq")
BODY_SIZE: Final = 37
MAC_SIZE: Final = 16
HANDLE_SIZE: Final = BODY_SIZE + MAC_SIZE
assert _BODY.size == BODY_SIZE
HANDLE_MAX_CHARS: Final = 128
"""Longer strings are refused before decoding (a handle is 71 characters)."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """What a handle names: one delivery of one message of a queue."""

    queue_id: int
    queue_offset: int
    commitlog_offset: int
    token: int
    visible_at_ms: int


def _mac(secret: bytes, body: bytes, broker_name: str, group: str, topic: str) -> bytes:
    scope = f"{broker_name}\0{group}\0{topic}".encode()
    return hmac.new(secret, body + scope, hashlib.sha256).digest()[:MAC_SIZE]


def encode(secret: bytes, broker_name: str, group: str, topic: str, handle: ReceiptHandle) -> str:
    """The handle string of one delivery, for ``group`` and ``topic`` on ``broker_name``."""
    body = _BODY.pack(
        HANDLE_VERSION,
        handle.queue_id,
        handle.queue_offset,
        handle.commitlog_offset,
        handle.token,
        handle.visible_at_ms,
    )
    raw = body + _mac(secret, body, broker_name, group, topic)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode(
    secret: bytes, broker_name: str, group: str, topic: str, text: str, field: str
) -> ReceiptHandle:
    """The delivery ``text`` names, when this broker issued it for ``group`` and ``topic``;
    else :class:`ReceiptHandleInvalid` naming ``field``."""
    if not text:
        raise ReceiptHandleInvalid(f"{field}: must not be empty")
    if len(text) > HANDLE_MAX_CHARS or not text.isascii():
        raise ReceiptHandleInvalid(f"{field}: not a receipt handle (malformed)")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ReceiptHandleInvalid(f"{field}: not a receipt handle (not base64)") from None
    if len(raw) != HANDLE_SIZE or raw[0] != HANDLE_VERSION:
        raise ReceiptHandleInvalid(f"{field}: not a receipt handle (wrong size or version)")
    body, mac = raw[:BODY_SIZE], raw[BODY_SIZE:]
    if not hmac.compare_digest(mac, _mac(secret, body, broker_name, group, topic)):
        raise ReceiptHandleInvalid(
            f"{field}: not a receipt handle this broker issued for group {group!r} "
            f"and topic {topic!r} (forged, altered, or for another group, topic or broker)"
        )
    _, queue_id, queue_offset, commitlog_offset, token, visible_at_ms = _BODY.unpack(body)
    if queue_id < 0 or queue_offset < 0 or commitlog_offset < 0:
        raise ReceiptHandleInvalid(f"{field}: not a receipt handle (negative position)")
    return ReceiptHandle(queue_id, queue_offset, commitlog_offset, token, visible_at_ms)


def visible_at_ms(text: str) -> int:
    """The ``visible_at_ms`` of a handle this broker just issued (not checked: use
    :func:`decode` on anything a client sent)."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return int(_BODY.unpack(raw[:BODY_SIZE])[5])
