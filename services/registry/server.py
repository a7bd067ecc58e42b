"""The RegistryService gRPC server: route discovery for producers, consumers and brokers.

The servicer is the edge: it turns requests into :mod:`route_table` values,
maps :class:`~services.registry.route_table.InvalidRequest` to
INVALID_ARGUMENT (the message names the field) and an unserved topic to
NOT_FOUND, and turns results back into protos. A background task drops
expired brokers every ``scan_interval_ms``; reads skip expired brokers at
once anyway, so the task only bounds how long a dead broker's state is kept.

Each registry is independent: no state is shared or persisted, and brokers
register with every registry (DESIGN 6).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from boltmq.kernel import runtime
from boltmq.v1 import registry_pb2, registry_pb2_grpc
from services.registry.config import RegistryConfig
from services.registry.route_table import (
    BrokerIdentity,
    BrokerLive,
    InvalidRequest,
    Registration,
    Route,
    RouteTable,
    TopicSettings,
)

log = logging.getLogger(__name__)

CONFIG_CLASS = RegistryConfig
"""The config dataclass ``boltmq serve registry`` loads."""
SERVICE_NAME: str = registry_pb2.DESCRIPTOR.services_by_name["RegistryService"].full_name
"""``boltmq.v1.RegistryService``, for health and reflection."""

_Response = TypeVar("_Response")
_Method = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Response]]


class _Rejected(Exception):
    """A request the servicer refuses with a gRPC status other than INVALID_ARGUMENT."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _edge(method: _Method[_Response]) -> _Method[_Response]:
    """Map the domain's named errors to gRPC statuses, once, for every RPC."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> _Response:
        try:
            return await method(self, request, context)
        except InvalidRequest as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except _Rejected as exc:
            await context.abort(exc.code, exc.details)
        raise AssertionError("context.abort() always raises")

    return wrapper


def identity_from_proto(request: Any) -> BrokerIdentity:
    """The broker named by a Register/UnregisterBrokerRequest (validated)."""
    return BrokerIdentity(
        request.cluster_name, request.broker_name, request.broker_id, request.address
    )


def registration_from_proto(request: registry_pb2.RegisterBrokerRequest) -> Registration:
    """A validated Registration from the wire."""
    topics = tuple(
        TopicSettings(t.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.order)
        for t in request.topics
    )
    return Registration(
        identity_from_proto(request),
        request.ha_address,
        topics,
        request.data_version,
        request.epoch,
    )


def route_to_proto(route: Route) -> registry_pb2.TopicRoute:
    """The wire form of a topic route."""
    message = registry_pb2.TopicRoute(topic=route.topic, order=route.order)
    for queue in route.queues:
        message.queues.add(
            broker_name=queue.broker_name,
            read_queue_nums=queue.read_queue_nums,
            write_queue_nums=queue.write_queue_nums,
            perm=queue.perm,
        )
    for broker in route.brokers:
        data = message.brokers.add(cluster_name=broker.cluster_name, broker_name=broker.broker_name)
        data.addresses.update(broker.addresses)
    return message


def live_to_proto(broker: BrokerLive) -> registry_pb2.BrokerLiveInfo:
    """The wire form of one live broker."""
    return registry_pb2.BrokerLiveInfo(
        cluster_name=broker.cluster_name,
        broker_name=broker.broker_name,
        broker_id=broker.broker_id,
        address=broker.address,
        ha_address=broker.ha_address,
        last_update_ms=broker.last_update_ms,
        data_version=broker.data_version,
        topic_count=broker.topic_count,
        epoch=broker.epoch,
    )


class RegistryServicer(registry_pb2_grpc.RegistryServiceServicer):
    """The four RPCs of ``boltmq.v1.RegistryService`` over one RouteTable."""

    def __init__(self, table: RouteTable) -> None:
        self._table = table

    @_edge
    async def RegisterBroker(
        self, request: registry_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.RegisterBrokerResponse:
        """Store or replace a broker's registration (its heartbeat)."""
        registration = registration_from_proto(request)
        identity = registration.identity
        refused = self._table.superseded(registration)
        if refused is not None:
            master = refused.master
            log.warning(
                "broker %s/%s at %s (epoch %d) refused as master: %s holds it with "
                "epoch %d; it should rejoin as replica %d",
                identity.cluster_name,
                identity.broker_name,
                identity.address,
                registration.epoch,
                master.address,
                master.epoch,
                refused.suggested_broker_id,
            )
            return registry_pb2.RegisterBrokerResponse(
                superseded=True,
                master_address=master.address,
                master_ha_address=master.ha_address,
                master_epoch=master.epoch,
                suggested_broker_id=refused.suggested_broker_id,
            )
        if self._table.register(registration):
            log.info(
                "broker %s/%s/%d registered from %s with %d topics",
                identity.cluster_name,
                identity.broker_name,
                identity.broker_id,
                identity.address,
                len(registration.topics),
            )
        return registry_pb2.RegisterBrokerResponse()

    @_edge
    async def UnregisterBroker(
        self, request: registry_pb2.UnregisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UnregisterBrokerResponse:
        """Drop a broker at once (its clean shutdown); unknown brokers are not an error."""
        identity = identity_from_proto(request)
        if self._table.unregister(identity):
            log.info(
                "broker %s/%s/%d at %s unregistered",
                identity.cluster_name,
                identity.broker_name,
                identity.broker_id,
                identity.address,
            )
        return registry_pb2.UnregisterBrokerResponse()

    @_edge
    async def GetRoute(
        self, request: registry_pb2.GetRouteRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.TopicRoute:
        """The topic's route; NOT_FOUND when no live broker serves it."""
        route = self._table.get_route(request.topic)
        if route is None:
            raise _Rejected(
                grpc.StatusCode.NOT_FOUND, f"topic {request.topic!r}: no live broker serves it"
            )
        return route_to_proto(route)

    @_edge
    async def GetRoutes(
        self, request: registry_pb2.GetRoutesRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.GetRoutesResponse:
        """The routes of many topics; those no live broker serves are listed as missing."""
        routes, missing = self._table.get_routes(request.topics)
        return registry_pb2.GetRoutesResponse(
            routes=[route_to_proto(r) for r in routes], missing=missing
        )

    @_edge
    async def GetClusterInfo(
        self, request: registry_pb2.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.ClusterInfo:
        """Every live broker."""
        return registry_pb2.ClusterInfo(
            brokers=[live_to_proto(b) for b in self._table.cluster_info()]
        )


class RegistryService:
    """The registry as a :class:`boltmq.kernel.runtime.Service`: servicer plus expiry task."""

    name: str = "registry"
    service_names: tuple[str, ...] = (SERVICE_NAME,)

    def __init__(self, config: RegistryConfig) -> None:
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
