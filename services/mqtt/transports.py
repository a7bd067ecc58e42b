"""The byte streams devices connect over: TCP (plain or TLS) and WebSocket.

Each is a :class:`services.mqtt.outbox.Transport`. MQTT over WebSocket (MQTT 5.0 6.0)
carries the packets in binary frames, any frame boundaries; the gateway offers the
``mqtt`` subprotocol on any path, frames at most ``max_packet_bytes`` + 5 bytes (larger:
close 1009), no compression.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import tempfile

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from boltmq.kernel.tls import ServerTLS

READ_CHUNK = 65_536
WRITE_HIGH_WATER = 256 * 1024
"""Bytes a device's socket may hold unsent before the writer waits for it to read."""


class StreamTransport:
    """MQTT over TCP or TLS (asyncio streams)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    async def read(self) -> bytes:
        return await self.reader.read(READ_CHUNK)

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


class WebSocketTransport:
    """MQTT over WebSocket: binary frames in, binary frames out."""

    def __init__(self, websocket: ServerConnection) -> None:
        self.websocket = websocket
        peer = websocket.remote_address
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._sending: list[asyncio.Task[None]] = []
        self._closed = False

    async def read(self) -> bytes:
        try:
            data = await self.websocket.recv()
        except ConnectionClosed:
            return b""
        if isinstance(data, str):
            return b""  # text frames are not MQTT (6.0): end the connection
        return data

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        task = asyncio.ensure_future(self._send(data))
        self._sending.append(task)
        self._sending = [t for t in self._sending if not t.done()]

    async def _send(self, data: bytes) -> None:
        try:
            await self.websocket.send(data)
        except ConnectionClosed:
            pass

    async def drain(self) -> None:
        pending = [t for t in self._sending if not t.done()]
        if pending:
            await asyncio.wait(pending)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            asyncio.ensure_future(self._close())

    async def _close(self) -> None:
        await self.drain()
        await self.websocket.close()


def ssl_context(tls: ServerTLS) -> ssl.SSLContext:
    """A server context for the devices' TLS port from the project's TLS settings
    (device certificates required when ``tls_client_ca_file`` is set)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl loads a chain and key from files only: a private temporary file, removed at once
    with tempfile.TemporaryDirectory() as directory:
        chain = os.path.join(directory, "chain.pem")
        key = os.path.join(directory, "key.pem")
        for path, data in ((chain, tls.cert_chain), (key, tls.private_key)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as file:
                file.write(data)
        context.load_cert_chain(chain, key)
    if tls.client_ca is not None:
        context.load_verify_locations(cadata=tls.client_ca.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    return context
