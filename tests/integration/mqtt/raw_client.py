"""Bare MQTT clients on a socket: MQTT 5 packets by the ``mqtt5`` library, MQTT 3.1.1
ones built here; for what paho does not let a test do (withhold a PUBACK, send a bad
packet, stay silent)."""

from __future__ import annotations

import socket
import time

import mqtt5

from services.mqtt import mqtt311
from tests.integration.mqtt.conftest import DEVICE, WAIT_S, MqttCluster


class RawClient:
    def __init__(self, cluster: MqttCluster) -> None:
        self.sock = socket.create_connection((cluster.host, cluster.port), timeout=WAIT_S)
        self.buffer = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, client_id: str, **kw: object) -> mqtt5.ConnAckPacket:
        kw.setdefault("username", DEVICE.access_key)
        kw.setdefault("password", DEVICE.secret_key.encode())
        self.send(mqtt5.ConnectPacket(client_id, **kw).write())  # type: ignore[arg-type]
        connack = self.packet()
        assert isinstance(connack, mqtt5.ConnAckPacket), connack
        return connack

    def packet(self, timeout_s: float = WAIT_S) -> mqtt5.Packet | None:
        """The next packet; None when the gateway closed the connection."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.buffer:
                try:
                    with memoryview(self.buffer) as view:
                        packet, size = mqtt5.read(view)
                except IndexError:
                    pass
                else:
                    del self.buffer[:size]
                    return packet
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not data:
                return None
            self.buffer += data

    def raw(self, timeout_s: float = WAIT_S) -> bytes:
        """Every byte until the gateway closes the connection."""
        self.sock.settimeout(timeout_s)
        data = bytes(self.buffer)
        while chunk := self.sock.recv(65536):
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def _string(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def connect_311(
    client_id: str,
    *,
    user: str | None = DEVICE.access_key,
    password: str | None = DEVICE.secret_key,
    clean: bool = True,
    keep_alive: int = 60,
    will: tuple[str, bytes, int] | None = None,
) -> bytes:
    """The bytes of an MQTT 3.1.1 CONNECT (protocol level 4), built field by field."""
    flags = 0x02 if clean else 0
    payload = _string(client_id.encode())
    if will is not None:
        flags |= 0x04 | will[2] << 3
        payload += _string(will[0].encode()) + _string(will[1])
    if user is not None:
        flags |= 0x80
        payload += _string(user.encode())
    if password is not None:
        flags |= 0x40
        payload += _string(password.encode())
    header = _string(b"MQTT") + bytes([4, flags]) + keep_alive.to_bytes(2, "big")
    return mqtt311.frame(0x10, header + payload)


def frames_311(data: bytes) -> list[tuple[int, bytes]]:
    """The (first byte, body) of every whole 3.1.1 packet in ``data``; a partial last
    one (cut by a close) is left out."""
    frames = []
    while data:
        length, shift = 0, 0
        for pos in range(1, 5):
            if pos >= len(data):
                return frames
            length |= (data[pos] & 0x7F) << shift
            shift += 7
            if not data[pos] & 0x80:
                break
        else:
            raise AssertionError(f"bad remaining length in {data[:8]!r}")
        if len(data) < pos + 1 + length:
            return frames
        frames.append((data[0], data[pos + 1 : pos + 1 + length]))
        data = data[pos + 1 + length :]
    return frames


class Raw311:
    """A bare MQTT 3.1.1 device on a socket: what paho does not let a test do."""

    def __init__(self, cluster: MqttCluster, connect: bytes) -> None:
        self.sock = socket.create_connection((cluster.host, cluster.port), timeout=WAIT_S)
        self.sock.sendall(connect)
        self.buffer = b""

    def packet(self, timeout_s: float = WAIT_S) -> tuple[int, bytes] | None:
        """The next packet (first byte, body); None when the gateway closed."""
        self.sock.settimeout(timeout_s)
        while True:
            frames = frames_311(self.buffer)
            if frames:
                first, body = frames[0]
                self.buffer = self.buffer[len(mqtt311.frame(first, body)) :]
                return frames[0]
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not chunk:
                return None
            self.buffer += chunk

    def close(self) -> None:
        self.sock.close()
