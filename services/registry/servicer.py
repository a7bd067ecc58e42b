"""The RegistryService gRPC servicer: route discovery for producers, consumers and brokers.

The servicer is the edge: it turns requests into :mod:`~services.registry.route_table`
values and results back into protos. Errors are the registry's named ones
(:mod:`services.registry.errors`): a bad field is INVALID_ARGUMENT (the message
names the field) and an unserved topic NOT_FOUND, each ended by the kernel's
:func:`~boltmq.kernel.errors.answers_errors`.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from boltmq.kernel.errors import answers_errors
from boltmq.v1 import registry_pb2, registry_pb2_grpc
from services.registry.errors import TopicNotServed
from services.registry.route_table import (
    BrokerLive,
    BrokerMember,
    Registration,
    Route,
    RouteTable,
    TopicSettings,
)

log = logging.getLogger(__name__)


def member_from_proto(request: Any) -> BrokerMember:
    """The broker named by a Register/UnregisterBrokerRequest (validated)."""
    return BrokerMember(
        request.cluster_name, request.broker_name, request.broker_id, request.address
    )


def registration_from_proto(request: registry_pb2.RegisterBrokerRequest) -> Registration:
    """A validated Registration from the wire."""
    topics = tuple(
        TopicSettings(t.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.order)
        for t in request.topics
    )
    return Registration(
        member_from_proto(request),
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

    @answers_errors
    async def RegisterBroker(
        self, request: registry_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.RegisterBrokerResponse:
        """Store or replace a broker's registration (its heartbeat)."""
        registration = registration_from_proto(request)
        member = registration.member
        refused = self._table.superseded(registration)
        if refused is not None:
            master = refused.master
            log.warning(
                "broker %s/%s at %s (epoch %d) refused as master: %s holds it with "
                "epoch %d; it should rejoin as replica %d",
                member.cluster_name,
                member.broker_name,
                member.address,
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
                member.cluster_name,
                member.broker_name,
                member.broker_id,
                member.address,
                len(registration.topics),
            )
        return registry_pb2.RegisterBrokerResponse()

    @answers_errors
    async def UnregisterBroker(
        self, request: registry_pb2.UnregisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UnregisterBrokerResponse:
        """Drop a broker at once (its clean shutdown); unknown brokers are not an error."""
        member = member_from_proto(request)
        if self._table.unregister(member):
            log.info(
                "broker %s/%s/%d at %s unregistered",
                member.cluster_name,
                member.broker_name,
                member.broker_id,
                member.address,
            )
        return registry_pb2.UnregisterBrokerResponse()

    @answers_errors
    async def GetRoute(
        self, request: registry_pb2.GetRouteRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.TopicRoute:
        """The topic's route; NOT_FOUND when no live broker serves it."""
        route = self._table.get_route(request.topic)
        if route is None:
            raise TopicNotServed(request.topic)
        return route_to_proto(route)

    @answers_errors
    async def GetRoutes(
        self, request: registry_pb2.GetRoutesRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.GetRoutesResponse:
        """The routes of many topics; those no live broker serves are listed as missing."""
        routes, missing = self._table.get_routes(request.topics)
        return registry_pb2.GetRoutesResponse(
            routes=[route_to_proto(r) for r in routes], missing=missing
        )

    @answers_errors
    async def GetClusterInfo(
        self, request: registry_pb2.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.ClusterInfo:
        """Every live broker."""
        return registry_pb2.ClusterInfo(
            brokers=[live_to_proto(b) for b in self._table.cluster_info()]
        )
