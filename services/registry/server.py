"""The registry process: ``boltmq serve registry`` runs :func:`serve` with a RegistryConfig.

Start-up, health, reflection and graceful shutdown come from the shared
:mod:`boltmq.kernel.runtime`; the RPCs are :mod:`services.registry.servicer`'s.
A background task drops expired brokers every ``scan_interval_ms``; reads skip
expired brokers at once anyway, so the task only bounds how long a dead
broker's state is kept.

Each registry is independent: no state is shared or persisted, and brokers
register with every registry.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from boltmq.kernel import runtime
from boltmq.kernel.caller_gate import caller_gate
from boltmq.kernel.internal_gate import internal_gate
from boltmq.v1 import registry_pb2, registry_pb2_grpc
from services.registry.config import RegistryConfig
from services.registry.internal_callers import REGISTRY_CALLERS
from services.registry.route_table import RouteTable
from services.registry.servicer import RegistryServicer

log = logging.getLogger(__name__)

CONFIG_CLASS = RegistryConfig
"""The config dataclass ``boltmq serve registry`` loads."""
SERVICE_NAME: str = registry_pb2.DESCRIPTOR.services_by_name["RegistryService"].full_name
"""``boltmq.v1.RegistryService``, for health and reflection."""


class RegistryService:
    """The registry as a :class:`boltmq.kernel.runtime.Service`: servicer plus expiry task."""

    name: str = "registry"
    service_names: tuple[str, ...] = (SERVICE_NAME,)

    def __init__(self, config: RegistryConfig) -> None:
        gate = internal_gate(config, SERVICE_NAME, REGISTRY_CALLERS)
        limits = caller_gate(config, SERVICE_NAME, "registry", gate)
        self.interceptors = tuple(i for i in (limits, gate) if i is not None)
        """Each caller's rate and in-flight limits (applications by IP address), then:
        registrations only from the named group's broker (under TLS; REGISTRY_CALLERS)."""
        self.config = config
        self.table = RouteTable(config.broker_expiry_ms)
        self._servicer = RegistryServicer(self.table)
        self._scan_task: asyncio.Task[None] | None = None

    def add_to(self, server: grpc.aio.Server) -> None:
        """Register the servicer on ``server``."""
        registry_pb2_grpc.add_RegistryServiceServicer_to_server(self._servicer, server)

    async def start(self) -> None:
        """Start the expiry task (the registry has nothing to recover)."""
        if self._scan_task is None:
            self._scan_task = asyncio.create_task(self._scan_forever(), name="registry-expiry")

    async def stop(self) -> None:
        """Stop the expiry task; the state is in memory only and simply goes away."""
        task, self._scan_task = self._scan_task, None
        await runtime.cancel_and_wait(task)

    async def _scan_forever(self) -> None:
        interval_s = self.config.scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.table.expire()
            except Exception:
                # The loop must outlive a bug in one pass; stopping it would keep
                # dead brokers' state forever.
                log.exception("expiry pass failed")


async def create_server(config: RegistryConfig) -> tuple[grpc.aio.Server, int]:
    """A registry server bound to ``listen_host:listen_port``, SERVING, not yet started.

    For in-process use (tests, an embedded cluster); ``server.stop()`` also
    stops the expiry task.
    """
    return await runtime.create_configured(
        RegistryService(config), config.listen_host, config.listen_port, config
    )


async def serve(config: RegistryConfig) -> None:
    """Run one registry until SIGTERM/SIGINT (``boltmq serve registry``)."""
    await runtime.serve_configured(
        lambda: RegistryService(config), config.listen_host, config.listen_port, config
    )
