"""A bare MQTT 5 client on a socket, packets by the ``mqtt5`` library: for what paho
does not let a test do (withhold a PUBACK, send a bad packet, stay silent)."""

from __future__ import annotations

import socket
import time

import mqtt5

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
