"""Codec of MQTT 3.1.1 (protocol level 4): the 5.0 codec (``mqtt5``) behind a rewrite.

No maintained PyPI package decodes 3.1.1 packets for a server beside the gateway's
dependencies (docs/mqtt.md, "Library"), so 3.1.1 packets are turned into the MQTT 5.0
packets they are a subset of, and ``mqtt5`` decodes and validates those; packets to a
3.1.1 device are encoded by ``mqtt5`` and turned back. The rewrite only moves bytes
around; every field is still checked by the library. Formats (MQTT 3.1.1 section 3):

| Packet (3.1.1) | Rewritten to 5.0 (``00``: an empty property block) |
|---|---|
| CONNECT ``00 04 "MQTT" 04`` flags keep-alive payload | level 5; ``00`` after keep-alive |
| CONNECT with a will | also ``00`` before the will topic |
| PUBLISH topic [packet id] payload | ``00`` after the packet id (or the topic at QoS 0) |
| SUBSCRIBE, UNSUBSCRIBE packet id filters | ``00`` after the packet id |
| SUBSCRIBE option byte with bits 2-7 set | malformed (MQTT-3.8.3-4) |
| PUBACK (2 bytes), PINGREQ, DISCONNECT (0 bytes) | unchanged (the same bytes in 5.0) |
| AUTH (type 15), a CONNECT of another level | malformed |

| Packet to a device (5.0 written by ``mqtt5``) | 3.1.1 |
|---|---|
| CONNACK | ``20 02`` session-present return-code (:func:`connack`, ``RETURN_CODES``) |
| PUBLISH | the property block removed (expiry, content type are lost) |
| PUBACK, UNSUBACK | packet id only |
| SUBACK | packet id, one byte a filter: the granted QoS or ``80`` (any 5.0 failure) |
| PINGRESP | unchanged |
| DISCONNECT | nothing: a 3.1.1 server closes the connection instead |
"""

from __future__ import annotations

import mqtt5

LEVEL = 4
CONNECT, PUBLISH, PUBACK, SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK = 1, 3, 4, 8, 9, 10, 11
PINGREQ, DISCONNECT, AUTH = 12, 14, 15
NO_PROPERTIES = b"\x00"
VARINT_MAX = 4

ACCEPTED = 0
UNACCEPTABLE_PROTOCOL = 1
IDENTIFIER_REJECTED = 2
SERVER_UNAVAILABLE = 3
BAD_USER_NAME_OR_PASSWORD = 4
NOT_AUTHORIZED = 5
SUBACK_FAILURE = 0x80
_C = mqtt5.ConnAckReasonCode
RETURN_CODES = {
    int(_C.SUCCESS): ACCEPTED,
    int(_C.UNSUPPORTED_PROTOCOL_VERSION): UNACCEPTABLE_PROTOCOL,
    int(_C.CLIENT_ID_NOT_VALID): IDENTIFIER_REJECTED,
    int(_C.SERVER_UNAVAILABLE): SERVER_UNAVAILABLE,
    int(_C.SERVER_BUSY): SERVER_UNAVAILABLE,
    int(_C.BAD_USER_NAME_OR_PASSWORD): BAD_USER_NAME_OR_PASSWORD,
    int(_C.NOT_AUTHORIZED): NOT_AUTHORIZED,
}
"""The 3.1.1 return code of a 5.0 CONNACK reason; any other refusal closes the connection
without a CONNACK (MQTT 3.1.1 section 3.2.2.3)."""


def _varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The variable byte integer at ``pos`` and the position after it; IndexError when
    the bytes end inside it, ValueError when it is longer than 4 bytes."""
    value = 0
    for n in range(VARINT_MAX):
        if pos + n >= len(data):
            raise IndexError("incomplete length")
        byte = data[pos + n]
        value |= (byte & 0x7F) << (7 * n)
        if not byte & 0x80:
            return value, pos + n + 1
    raise ValueError("malformed remaining length")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def frame(first: int, body: bytes) -> bytes:
    """A packet: its first byte, the remaining length and ``body``."""
    return bytes([first]) + _encode_varint(len(body)) + body


def _string_end(body: bytes, pos: int) -> int:
    if pos + 2 > len(body):
        raise ValueError("truncated packet")
    end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
    if end > len(body):
        raise ValueError("truncated packet")
    return end


def protocol_level(buffer: bytes | bytearray | memoryview) -> int | None:
    """The protocol level of the CONNECT at the start of ``buffer`` (None: not a whole
    CONNECT header yet, or not a CONNECT)."""
    try:
        _, start = _varint(buffer, 1)
    except (IndexError, ValueError):
        return None
    if buffer[0] >> 4 != CONNECT or len(buffer) < start + 2:
        return None
    name_end = start + 2 + int.from_bytes(buffer[start : start + 2], "big")
    return buffer[name_end] if len(buffer) > name_end else None


def to_v5(buffer: bytes | memoryview) -> tuple[bytes, int]:
    """The first packet in ``buffer`` rewritten as MQTT 5.0, and its size in ``buffer``.

    IndexError: not a whole packet yet; ValueError: malformed."""
    if not buffer:
        raise IndexError("empty")
    length, start = _varint(buffer, 1)
    size = start + length
    if len(buffer) < size:
        raise IndexError("incomplete packet")
    first = buffer[0]
    kind = first >> 4
    body = bytes(buffer[start:size])
    if kind == CONNECT:
        name_end = _string_end(body, 0)
        if body[:name_end] != b"\x00\x04MQTT" or len(body) < name_end + 4:
            raise ValueError("not an MQTT 3.1.1 CONNECT")
        if body[name_end] != LEVEL:
            raise ValueError("Invalid protocol version")
        flags = body[name_end + 1]
        if flags & 0x40 and not flags & 0x80:
            raise ValueError("password without user name")  # MQTT-3.1.2-22
        header_end = name_end + 4
        id_end = _string_end(body, header_end)
        will = NO_PROPERTIES if flags & 0x04 else b""
        body = (
            body[:name_end]
            + bytes([5])
            + body[name_end + 1 : header_end]
            + NO_PROPERTIES
            + body[header_end:id_end]
            + will
            + body[id_end:]
        )
    elif kind == PUBLISH:
        at = _string_end(body, 0) + (2 if (first >> 1) & 3 else 0)
        if at > len(body):
            raise ValueError("truncated packet")
        body = body[:at] + NO_PROPERTIES + body[at:]
    elif kind in (SUBSCRIBE, UNSUBSCRIBE):
        if len(body) < 2:
            raise ValueError("truncated packet")
        pos = 2
        while kind == SUBSCRIBE and pos < len(body):
            pos = _string_end(body, pos)
            if pos >= len(body) or body[pos] & 0xFC:
                raise ValueError("bad subscription options")  # MQTT-3.8.3-4
            pos += 1
        body = body[:2] + NO_PROPERTIES + body[2:]
    elif kind in (PUBACK, PINGREQ, DISCONNECT) and length != (2 if kind == PUBACK else 0):
        raise ValueError("bad length")
    elif kind in (AUTH, 0):
        raise ValueError(f"packet type {kind} is not MQTT 3.1.1")
    return frame(first, body), size


def read(buffer: bytes | memoryview) -> tuple[mqtt5.Packet, int]:
    """Decode the first 3.1.1 packet in ``buffer`` as ``mqtt5.read`` would a 5.0 one."""
    data, size = to_v5(buffer)
    packet, used = mqtt5.read(memoryview(data))
    if used != len(data):
        raise ValueError("trailing bytes in packet")
    return packet, size


def connack(return_code: int, session_present: bool = False) -> bytes:
    return bytes([0x20, 2, int(session_present and return_code == ACCEPTED), return_code])


def write(packet: object) -> bytes:
    """The 3.1.1 bytes of an ``mqtt5`` packet for a device (b"" for DISCONNECT)."""
    if isinstance(packet, mqtt5.DisconnectPacket):
        return b""
    if isinstance(packet, mqtt5.ConnAckPacket):
        code = RETURN_CODES.get(int(packet.reason_code))
        return b"" if code is None else connack(code, packet.session_present)
    if isinstance(packet, mqtt5.PubAckPacket | mqtt5.UnsubAckPacket):
        kind = PUBACK if isinstance(packet, mqtt5.PubAckPacket) else UNSUBACK
        return bytes([kind << 4, 2]) + packet.packet_id.to_bytes(2, "big")
    if isinstance(packet, mqtt5.SubAckPacket):
        codes = bytes(
            int(c) if int(c) < SUBACK_FAILURE else SUBACK_FAILURE for c in packet.reason_codes
        )
        body = packet.packet_id.to_bytes(2, "big") + codes
        return frame(SUBACK << 4, body)
    data: bytes = packet.write()  # type: ignore[attr-defined]
    if isinstance(packet, mqtt5.PublishPacket):
        _, start = _varint(data, 1)
        body = data[start:]
        at = _string_end(body, 0) + (2 if packet.packet_id is not None else 0)
        properties, after = _varint(body, at)
        body = body[:at] + body[after + properties :]
        return frame(data[0], body)
    return data
