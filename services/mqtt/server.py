"""The MQTT gateway process: ``boltmq serve mqtt`` runs :func:`serve` with an MqttConfig.

Listeners: MQTT over TCP on ``listen_port`` (1883), over TLS on ``tls_listen_port``
(8883, when ``tls_cert_file`` is set) and over WebSocket on ``ws_listen_port`` (8083;
TLS too when ``tls_cert_file`` is set; -1: off). Probes: the gRPC health service on
``health_port`` as every BoltMQ service (SERVING once the listeners are open and the
retained messages are being read; NOT_SERVING from SIGTERM on). A SIGTERM closes the
listeners, ends every connection with DISCONNECT 0x8B (server shutting down; wills are
published, persistent sessions saved) and stops.

The READY line names every listener: ``READY mqtt H:P tls=H:P ws=H:P``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl

import mqtt5
from grpc_health.v1 import health, health_pb2
from websockets.asyncio.server import Server as WebSocketServer
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as websocket_serve

from boltmq.kernel import runtime
from boltmq.kernel.tls import server_tls
from services.mqtt.bridge import Bridge
from services.mqtt.config import MqttConfig
from services.mqtt.connection import Connection
from services.mqtt.hub import Hub
from services.mqtt.metrics import GatewayMetrics
from services.mqtt.transports import StreamTransport, WebSocketTransport, ssl_context

log = logging.getLogger(__name__)

CONFIG_CLASS = MqttConfig
"""The config dataclass ``boltmq serve mqtt`` loads."""
SERVICE_NAME = "boltmq.mqtt"
"""The health service name the probes ask for (besides "" and "liveness")."""
FIXED_HEADER_MAX = 5


class Gateway:
    """The listeners, the hub and the bridge of one pod."""

    def __init__(self, config: MqttConfig) -> None:
        self.config = config
        tls = server_tls(config)
        self.ssl = ssl_context(tls) if tls is not None else None
        self.bridge: Bridge | None = None
        self.hub: Hub | None = None
        self.servers: list[asyncio.Server] = []
        self.websocket: WebSocketServer | None = None
        self.addresses: dict[str, str] = {}
        """Listener name (mqtt, tls, ws) -> host:port bound."""
        self._connections: set[asyncio.Task[None]] = set()
        self.pod_id = config.pod_id or f"{socket.gethostname()}-{os.getpid()}"

    async def start(self) -> None:
        self.bridge = await asyncio.to_thread(Bridge, self.config)
        self.hub = Hub(self.config, self.bridge, self.pod_id)
        GatewayMetrics(self.hub)
        await self.hub.start()
        host = self.config.listen_host
        await self._listen("mqtt", host, self.config.listen_port, None)
        if self.ssl is not None:
            await self._listen("tls", host, self.config.tls_listen_port, self.ssl)
        if self.config.ws_listen_port >= 0:
            self.websocket = await websocket_serve(
                self._serve_websocket,
                host,
                self.config.ws_listen_port,
                ssl=self.ssl,
                subprotocols=["mqtt"],  # type: ignore[list-item]
                compression=None,
                max_size=self.config.max_packet_bytes + FIXED_HEADER_MAX,
                ping_interval=None,
            )
            self.addresses["ws"] = _bound(self.websocket.sockets)
        log.info("mqtt gateway %s: %s", self.pod_id, self.addresses)

    async def _listen(
        self, name: str, host: str, port: int, context: ssl.SSLContext | None
    ) -> None:
        try:
            server = await asyncio.start_server(self._serve_stream, host, port, ssl=context)
        except OSError as exc:
            raise runtime.PortInUse(f"cannot listen on {host}:{port} ({name}): {exc}") from None
        self.servers.append(server)
        self.addresses[name] = _bound(server.sockets)

    async def _serve_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self._serve(StreamTransport(reader, writer))

    async def _serve_websocket(self, websocket: ServerConnection) -> None:
        transport = WebSocketTransport(websocket)
        await self._serve(transport)
        await websocket.wait_closed()

    async def _serve(self, transport: StreamTransport | WebSocketTransport) -> None:
        assert self.hub is not None
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await Connection(self.hub, transport).run()
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        if self.websocket is not None:
            self.websocket.close(close_connections=False)
        if self.hub is not None:
            for connection in list(self.hub.connections.values()):
                connection.close_later(
                    mqtt5.DisconnectReasonCode.SERVER_SHUTTING_DOWN, "the gateway stops"
                )
            if self._connections:
                await asyncio.wait(list(self._connections), timeout=5)
            await self.hub.stop()
        if self.bridge is not None:
            await asyncio.to_thread(self.bridge.close)


def _bound(sockets: object) -> str:
    host, port = list(sockets)[0].getsockname()[:2]  # type: ignore[call-overload]
    return f"{host}:{port}"


async def serve(config: MqttConfig) -> None:
    """Run one gateway until SIGTERM/SIGINT (``boltmq serve mqtt``)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    health_servicer = health.aio.HealthServicer()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await health_servicer.set(runtime.LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_server = (
        await runtime.start_health_listener(
            health_servicer, config.health_host or config.listen_host, config.health_port
        )
        if config.health_port
        else None
    )
    gateway = Gateway(config)
    try:
        await gateway.start()
        for name in ("", SERVICE_NAME):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        extra = " ".join(f"{k}={v}" for k, v in gateway.addresses.items() if k != "mqtt")
        print(
            f"{runtime.READY_PREFIX} mqtt {gateway.addresses['mqtt']} {extra}".rstrip(), flush=True
        )
        await stop.wait()
        log.info("mqtt gateway stopping")
        await health_servicer.enter_graceful_shutdown()
    finally:
        await gateway.stop()
        if health_server is not None:
            await health_server.stop(0)
    log.info("mqtt gateway stopped")
