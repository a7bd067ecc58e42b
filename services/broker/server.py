"""The broker process: ``boltmq serve broker`` runs :func:`serve` with a BrokerConfig.

Start-up, health, reflection and graceful shutdown come from the shared
:mod:`boltmq.kernel.runtime`; this module only adapts the :class:`Broker` to its
``Service`` protocol.
"""

from __future__ import annotations

import grpc

from boltmq.kernel import runtime
from boltmq.rocketmq.v2 import service_pb2_grpc as rocketmq_grpc
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from services.broker.broker import Broker
from services.broker.config import BrokerConfig
from services.broker.rocketmq_v2.servicer import SERVICE_NAME as ROCKETMQ_SERVICE_NAME

CONFIG_CLASS = BrokerConfig
SERVICE_NAME = broker_pb2.DESCRIPTOR.services_by_name["BrokerService"].full_name


class BrokerService:
    """The broker as a :class:`boltmq.kernel.runtime.Service`."""

    name = "broker"
    service_names: tuple[str, ...] = (SERVICE_NAME, ROCKETMQ_SERVICE_NAME)

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker = Broker(config)
        self.bound_port = config.listen_port
        """The port the server really listens on (differs from the config for port 0)."""
        self.interceptors = (self.broker.gate,)
        """Access control and client limits, in front of every broker call."""
        self.maximum_concurrent_rpcs = config.max_concurrent_rpcs or None
        """Calls in progress at once (gRPC answers RESOURCE_EXHAUSTED beyond)."""

    def add_to(self, server: grpc.aio.Server) -> None:
        """Register the servicers (BoltMQ's and the RocketMQ 5 protocol's); the pulls
        forward the store's encoded answers."""
        servicer = self.broker.servicer
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(servicer, server)
        rocketmq_grpc.add_MessagingServiceServicer_to_server(self.broker.rocketmq, server)
        runtime.answer_encoded(
            server,
            SERVICE_NAME,
            "PullMessage",
            servicer.PullMessage,
            broker_pb2.BrokerPullRequest.FromString,
        )
        runtime.answer_encoded(
            server,
            SERVICE_NAME,
            "PullQueues",
            servicer.PullQueues,
            broker_pb2.BrokerPullQueuesRequest.FromString,
        )

    def bound(self, port: int) -> None:
        """The real port (registries must be told it when the config says 0)."""
        self.bound_port = port

    async def before_stop(self) -> None:
        """Answer parked pulls, end the RocketMQ protocol's Telemetry streams and the send
        streams now: each would otherwise hold the whole grace period."""
        self.broker.hub.close()
        self.broker.rocketmq.end_streams()
        self.broker.servicer.close_streams()

    def advertised_address(self) -> str:
        """``host:port`` announced to registries: the configured one, else host and bound port."""
        return runtime.advertised_address(
            self.config.advertised_address, self.config.listen_host, self.bound_port
        )

    async def start(self) -> None:
        """Load metadata from the store and register with the registries."""
        await self.broker.start(self.advertised_address())

    async def wait_ready(self) -> None:
        """Return once a registry took this broker (its periodic rounds keep trying)."""
        await self.broker.registrar.registered.wait()

    async def stop(self) -> None:
        """Save offsets, unregister, close connections."""
        await self.broker.stop()


async def create_server(config: BrokerConfig) -> tuple[grpc.aio.Server, int]:
    """A broker server bound to ``listen_host:listen_port``, its broker started, not yet started.

    The broker has loaded its metadata and registered by the time this
    returns; ``server.stop()`` answers parked pulls first and stops the broker
    (offsets saved, unregistered) after.
    """
    return await runtime.create_configured(
        BrokerService(config), config.listen_host, config.listen_port, config
    )


async def serve(config: BrokerConfig) -> None:
    """Run the broker until SIGTERM/SIGINT (what ``boltmq serve broker`` calls)."""
    await runtime.serve_configured(
        lambda: BrokerService(config), config.listen_host, config.listen_port, config
    )
