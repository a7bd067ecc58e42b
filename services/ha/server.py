"""The HA service process: ``boltmq serve ha`` runs :func:`serve` with an HAConfig.

Start-up, health, reflection and graceful shutdown come from the shared
:mod:`boltmq.kernel.runtime`. Health turns SERVING (and ``READY ha host:port`` is
printed) only once the store beside it has answered GetStoreInfo, so a
process that is READY knows its role. On SIGTERM every replica's stream is
ended first (``before_stop``), then the follower and the role watcher stop.
"""

from __future__ import annotations

import grpc
from opentelemetry.metrics import MeterProvider

from boltmq.kernel import runtime
from boltmq.kernel.caller_gate import caller_gate
from boltmq.kernel.config import ConfigError
from boltmq.kernel.internal_gate import internal_gate
from boltmq.v1 import ha_pb2, ha_pb2_grpc
from services.ha.config import HAConfig
from services.ha.internal_callers import HA_CALLERS
from services.ha.node import HANode
from services.ha.servicer import HAServicer

CONFIG_CLASS = HAConfig
"""The config dataclass ``boltmq serve ha`` loads."""
SERVICE_NAME: str = ha_pb2.DESCRIPTOR.services_by_name["HAService"].full_name
"""``boltmq.v1.HAService``, for health and reflection."""


class HAService:
    """The HA node as a :class:`boltmq.kernel.runtime.Service`."""

    name = "ha"
    service_names: tuple[str, ...] = (SERVICE_NAME,)

    def __init__(self, config: HAConfig, meter_provider: MeterProvider | None = None) -> None:
        gate = internal_gate(config, SERVICE_NAME, HA_CALLERS)
        if gate is not None and gate.own.group != config.broker_name:
            raise ConfigError(
                f"tls_cert_file names {gate.own} but broker_name is {config.broker_name!r}: "
                "the HA service would accept replicas of another group"
            )
        limits = caller_gate(config, SERVICE_NAME, "HA service", gate)
        self.interceptors = tuple(i for i in (limits, gate) if i is not None)
        """Each caller's rate and in-flight limits (a replica's stream holds one slot), then:
        Replicate only for its own group's HA services (under TLS; HA_CALLERS)."""
        self.config = config
        self.node = HANode(config, meter_provider)
        self._servicer = HAServicer(self.node)
        self.bound_port = config.listen_port
        """The port the server really listens on (differs from the config for port 0)."""

    def add_to(self, server: grpc.aio.Server) -> None:
        """Register the servicer."""
        ha_pb2_grpc.add_HAServiceServicer_to_server(self._servicer, server)

    def bound(self, port: int) -> None:
        """The real port (a replica names itself with it to its master)."""
        self.bound_port = port

    def advertised_address(self) -> str:
        """``host:port`` this service names itself with: the configured one, else host and port."""
        return runtime.advertised_address(
            self.config.advertised_address, self.config.listen_host, self.bound_port
        )

    async def start(self) -> None:
        """Wait for the store's first answer and take up its role."""
        await self.node.start(self.advertised_address())

    async def before_stop(self) -> None:
        """End replica streams now: each would otherwise hold the whole grace period."""
        await self.node.before_stop()

    async def stop(self) -> None:
        """Stop following and watching; close connections."""
        await self.node.stop()


async def create_server(
    config: HAConfig, meter_provider: MeterProvider | None = None
) -> tuple[grpc.aio.Server, int]:
    """An HA server bound to ``listen_host:listen_port``, its node started, not yet started.

    For in-process use (tests); ``server.stop()`` ends replica streams first and
    stops the node after.
    """
    return await runtime.create_configured(
        HAService(config, meter_provider), config.listen_host, config.listen_port, config
    )


async def serve(config: HAConfig) -> None:
    """Run the HA service until SIGTERM/SIGINT (what ``boltmq serve ha`` calls)."""
    await runtime.serve_configured(
        lambda: HAService(config), config.listen_host, config.listen_port, config
    )
