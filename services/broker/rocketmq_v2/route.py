"""Routes: QueryRoute's answer, each queue of a topic with the broker that serves it.

The registries know which broker groups serve a topic and how many read and write
queues each has (RocketMQ 4's route). The protocol wants one ``MessageQueue`` per
queue: its id, its permission, the broker (group name, id 0 for a master) with the
endpoints a client connects to, and the message types it accepts. A BoltMQ broker's
registered address is its gRPC port, the same one that serves this protocol, so the
endpoints are that address. Queue ``i`` of a group may be read when ``i`` is below
the group's read queue count and its perm has READ, written when below the write
queue count with WRITE.

The queues are listed interleaved across broker groups (queue 0 of each group, then
queue 1 of each, ...). The official clients send round-robin over this list and retry a
failed send on the next queue of the same cached route (the Python client re-queries a
route only on its timer: 10 s after start, then every 30 s); interleaved, a retry goes
to another group, so while one group's master is down a send still reaches a live group
within two attempts (when the groups have as many queues each).

BoltMQ topics are untyped: every queue accepts NORMAL, FIFO, DELAY and TRANSACTION
messages (the clients check a message's type against this list before sending).

QueryAssignment (push consumers) is answered from the same queues: one readable queue
per broker group (:meth:`Routes.assignments`).

A topic no registry knows is answered from this broker's own topics when it has it
(it registers within a round), else auto-created here when
``auto_create_topic_enable`` is on (as a first send would), else TOPIC_NOT_FOUND.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from boltmq.kernel.registry_client import AsyncRegistryClient, RegistryError, TopicNotFound
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.v1 import registry_pb2
from services.broker.errors import BrokerError
from services.broker.metadata.topic_config import (
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.rocketmq_v2.status import Refused, code_of_grpc

ACCEPTED_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)
MASTER_ID = 0


def endpoints_of(address: str) -> v2.Endpoints:
    """``host:port`` (``[v6]:port`` too) as the protocol's Endpoints."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        scheme = v2.IPv6 if ipaddress.ip_address(host).version == 6 else v2.IPv4
    except ValueError:
        scheme = v2.DOMAIN_NAME
    return v2.Endpoints(
        scheme=scheme, addresses=[v2.Address(host=host, port=int(port) if port.isdigit() else 0)]
    )


def _permission(queue_id: int, read: int, write: int, perm: int) -> v2.Permission.ValueType:
    readable = queue_id < read and perm & PERM_READ
    writable = queue_id < write and perm & PERM_WRITE
    if readable and writable:
        return v2.READ_WRITE
    if readable:
        return v2.READ
    return v2.WRITE if writable else v2.NONE


def queues_of(topic: str, route: registry_pb2.TopicRoute) -> list[v2.MessageQueue]:
    """The protocol's queues of a registry route (groups without a live master are left
    out: nobody could send to them, and BoltMQ's replicas serve no consumption here),
    interleaved across groups (module docstring)."""
    masters = {
        broker.broker_name: broker.addresses[MASTER_ID]
        for broker in route.brokers
        if MASTER_ID in broker.addresses
    }
    queues: list[tuple[int, str, v2.MessageQueue]] = []
    for data in sorted(route.queues, key=lambda q: q.broker_name):
        address = masters.get(data.broker_name)
        if address is None:
            continue
        broker = v2.Broker(name=data.broker_name, id=MASTER_ID, endpoints=endpoints_of(address))
        for queue_id in range(max(data.read_queue_nums, data.write_queue_nums)):
            queue = v2.MessageQueue(
                topic=v2.Resource(name=topic),
                id=queue_id,
                permission=_permission(
                    queue_id, data.read_queue_nums, data.write_queue_nums, data.perm
                ),
                broker=broker,
                accept_message_types=ACCEPTED_TYPES,
            )
            queues.append((queue_id, data.broker_name, queue))
    return [queue for _, _, queue in sorted(queues, key=lambda q: (q[0], q[1]))]


def local_route(config: TopicConfig, broker_name: str, address: str) -> registry_pb2.TopicRoute:
    """This broker's own part of a topic's route (before a registry has it)."""
    return registry_pb2.TopicRoute(
        topic=config.name,
        queues=[
            registry_pb2.QueueData(
                broker_name=broker_name,
                read_queue_nums=config.read_queue_nums,
                write_queue_nums=config.write_queue_nums,
                perm=config.perm,
            )
        ],
        brokers=[registry_pb2.BrokerData(broker_name=broker_name, addresses={0: address})],
    )


class Routes:
    """Answers QueryRoute from the registries, this broker's topics, or an auto-creation."""

    def __init__(
        self,
        registry: AsyncRegistryClient | None,
        topics: TopicConfigManager,
        broker_name: str,
        address: Callable[[], str],
        auto_create: Callable[[str], Awaitable[TopicConfig]],
    ) -> None:
        self._registry = registry
        self._topics = topics
        self._broker_name = broker_name
        self._address = address
        """This broker's advertised ``host:port``."""
        self._auto_create = auto_create
        """Creates a topic here, or raises (auto-creation off, limits): SendProcessor's."""

    async def queues(self, topic: str) -> list[v2.MessageQueue]:
        """Every queue of ``topic``; Refused TOPIC_NOT_FOUND when none serves it."""
        route = await self._registered(topic)
        if route is None:
            config = self._topics.get(topic)
            if config is None:
                try:
                    config = await self._auto_create(topic)
                except BrokerError as exc:
                    code = code_of_grpc(exc.code)
                    raise Refused(
                        v2.TOPIC_NOT_FOUND if code == v2.NOT_FOUND else code, str(exc)
                    ) from None
            route = local_route(config, self._broker_name, self._address())
        queues = queues_of(topic, route)
        if not queues:
            raise Refused(v2.TOPIC_NOT_FOUND, f"topic {topic!r}: no live master serves it")
        return queues

    async def assignments(self, topic: str) -> list[v2.Assignment]:
        """QueryAssignment's answer: one readable queue of each broker group. POP reads
        every queue of the topic on a broker whichever the receive names, and shares the
        messages among the group's consumers, so each consumer receives from every
        group."""
        chosen: dict[str, v2.MessageQueue] = {}
        for queue in await self.queues(topic):
            if queue.permission in (v2.READ, v2.READ_WRITE):
                chosen.setdefault(queue.broker.name, queue)
        return [v2.Assignment(message_queue=queue) for queue in chosen.values()]

    async def _registered(self, topic: str) -> registry_pb2.TopicRoute | None:
        if self._registry is None:
            return None
        try:
            return await self._registry.get_route(topic)
        except TopicNotFound:
            return None
        except RegistryError as exc:
            if self._topics.get(topic) is not None:
                return None  # answered from this broker's own topics
            raise Refused(v2.INTERNAL_SERVER_ERROR, f"no registry answered: {exc}") from None

    async def close(self) -> None:
        if self._registry is not None:
            await self._registry.close()
