"""What producers and consumers share: identity, routes and broker connections.

Routes come from the registries (:mod:`boltmq.kernel.registry_client`) and are cached
for ``route_refresh_ms``; a failure that suggests a stale route (a broker gone)
drops the cached entry so the next call asks again. One gRPC channel per broker
address is shared by every producer and consumer of the instance. With
credentials, every call on it is signed for the broker group the routes name at
that address (:mod:`boltmq.kernel.signing`'s target), so a captured call is
refused by every other group.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence

import grpc

from boltmq.kernel import channels
from boltmq.kernel.registry_client import RegistryClient, RegistryUnavailable, TopicNotFound
from boltmq.kernel.signing import Credentials, RequestSigner
from boltmq.kernel.tls import ClientTLS
from boltmq.message import MessageQueue
from boltmq.send_stream import SendStream
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0
LANGUAGE = "PYTHON"
"""What heartbeats say this SDK is written in (RocketMQ's LanguageCode)."""
REPLICA_READS_S = 5.0
"""How long reads stay on a replica after the master failed to answer or suggested it."""
DEFAULT_TOPIC = "TBW102"
"""The auto-create template: a send to an unknown topic goes to the brokers that serve it."""
Targets = list[tuple[MessageQueue, str]]
"""Writable queues, each with the address of its group's master."""

__all__ = [
    "BoltMQError",
    "ClientInstance",
    "RegistryUnavailable",
    "TopicNotFound",
    "BrokerUnavailable",
]


class BoltMQError(Exception):
    """Base of the SDK's own errors."""


class BrokerUnavailable(BoltMQError):
    """No broker serving the topic could be reached."""


def parse_addresses(registry: str | Sequence[str]) -> list[str]:
    """``"h1:9876,h2:9876"`` or a list -> a list of addresses (validated)."""
    items = registry.split(",") if isinstance(registry, str) else list(registry)
    addresses = [a.strip() for a in items if a and a.strip()]
    if not addresses:
        raise ValueError("registry: give at least one host:port")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"registry address {address!r} is not host:port")
    return addresses


BROKER_SERVICE = "/" + broker_pb2.DESCRIPTOR.services_by_name["BrokerService"].full_name
PULL_METHOD = f"{BROKER_SERVICE}/PullMessage"
PULL_QUEUES_METHOD = f"{BROKER_SERVICE}/PullQueues"
SEND_METHOD = f"{BROKER_SERVICE}/SendMessage"


def new_client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


def heartbeat_request(
    client_id: str,
    *,
    producer_groups: Sequence[str] = (),
    consumer_groups: Sequence[broker_pb2.ConsumerGroupHeartbeat] = (),
) -> broker_pb2.HeartbeatRequest:
    """A heartbeat of ``client_id`` in these groups, saying what this SDK is: language
    ``PYTHON`` and version ``boltmq.__version__``."""
    from boltmq import __version__  # the package imports its modules lazily: no cycle

    return broker_pb2.HeartbeatRequest(
        client_id=client_id,
        producer_groups=producer_groups,
        consumer_groups=consumer_groups,
        language=LANGUAGE,
        version=__version__,
    )


class ClientInstance:
    """Routes and broker stubs for one producer or consumer."""

    def __init__(
        self,
        registry: str | Sequence[str],
        *,
        route_refresh_ms: int = 30_000,
        rpc_timeout_s: float = 5.0,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
        stream_in_flight_max: int = 256,
    ) -> None:
        self.client_id = new_client_id()
        self.tls = tls
        """TLS of every channel (registries and brokers); None: plaintext."""
        self.credentials = credentials
        """Access key / secret key every broker call is signed with (None: unsigned)."""
        self.registry = RegistryClient(parse_addresses(registry), tls=tls)
        self.route_refresh_s = route_refresh_ms / 1000
        self.rpc_timeout_s = rpc_timeout_s
        self._routes: dict[str, tuple[registry_pb2.TopicRoute, float]] = {}
        self._write_queues: dict[
            str, tuple[registry_pb2.TopicRoute, list[MessageQueue], Targets]
        ] = {}
        """The last route each topic's writable queues were listed from, that list, and the
        queues with their masters' addresses (:meth:`write_targets`)."""
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, broker_pb2_grpc.BrokerServiceStub] = {}
        self._pulls: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._pull_queues: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._sends: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._send_streams: dict[str, SendStream] = {}
        self._stream_in_flight_max = stream_in_flight_max
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}
        """Broker address -> the name of its group, from the routes (what calls are signed
        for)."""
        self._master_down: dict[str, float] = {}
        """Broker name -> monotonic time until which reads go to a replica."""
        self._cluster_masters: set[str] = set()
        """The masters the last :meth:`cluster_brokers` answer named."""

    # ---------------------------------------------------------------- routes
    def route(self, topic: str, *, refresh: bool = False) -> registry_pb2.TopicRoute:
        """The topic's route (cached); TopicNotFound / RegistryUnavailable otherwise.

        When no registry answers, a route cached earlier is used however old it is
        (the brokers it names may well still serve): a registry outage does not stop
        clients that already know their topics.
        """
        cached = None if refresh else self._fresh(topic, time.monotonic())
        if cached is not None:
            return cached
        try:
            route = self.registry.get_route(topic)
        except RegistryUnavailable:
            if topic in self._routes:
                return self._routes[topic][0]
            raise
        self._keep(topic, route, time.monotonic())
        return route

    def routes(self, topics: Iterable[str]) -> list[str]:
        """Cache the routes of ``topics`` that are not fresh, in GetRoutes calls (a topic
        at a time costs a call each: ~0.6 s for 1,024 topics); return the topics no
        registry knows. RegistryUnavailable when none answers."""
        now = time.monotonic()
        stale = [topic for topic in topics if self._fresh(topic, now) is None]
        if not stale:
            return []
        found, missing = self.registry.get_routes(stale)
        now = time.monotonic()
        for topic, route in found.items():
            self._keep(topic, route, now)
        return missing

    def _keep(self, topic: str, route: registry_pb2.TopicRoute, now: float) -> None:
        """Cache ``route`` and learn the group name of each of its broker addresses."""
        self._routes[topic] = (route, now)
        for broker in route.brokers:
            for address in broker.addresses.values():
                self._names[address] = broker.broker_name

    def cluster_brokers(self) -> list[registry_pb2.BrokerLiveInfo]:
        """Every live broker the registries know (``GetClusterInfo``), learning the group
        name at each address; RegistryError when none answers."""
        brokers = list(self.registry.cluster_info().brokers)
        for broker in brokers:
            self._names[broker.address] = broker.broker_name
        with self._lock:
            self._cluster_masters = {b.address for b in brokers if b.broker_id == MASTER_ID}
        return brokers

    def broker_name_at(self, address: str) -> str:
        """The group name the routes give the broker at ``address`` (empty: unknown)."""
        return self._names.get(address, "")

    def _fresh(self, topic: str, now: float) -> registry_pb2.TopicRoute | None:
        """The cached route of ``topic`` if younger than ``route_refresh_s``."""
        cached = self._routes.get(topic)
        if cached is None or now - cached[1] >= self.route_refresh_s:
            return None
        return cached[0]

    def forget_route(self, topic: str) -> None:
        self._routes.pop(topic, None)
        self._write_queues.pop(topic, None)

    @staticmethod
    def broker_address(
        route: registry_pb2.TopicRoute, broker_name: str, *, master_only: bool = True
    ) -> str | None:
        for broker in route.brokers:
            if broker.broker_name == broker_name:
                if MASTER_ID in broker.addresses:
                    return broker.addresses[MASTER_ID]
                if not master_only and broker.addresses:
                    return broker.addresses[min(broker.addresses)]
        return None

    def write_queues(
        self, topic: str, route: registry_pb2.TopicRoute | None = None
    ) -> list[MessageQueue]:
        """Writable queues of the topic on brokers with a live master (a new list: the
        caller may change it; listed again only when the route changed)."""
        route = route or self.route(topic)
        return list(self._listed(topic, route)[1])

    def write_targets(self, topic: str) -> Targets:
        """:meth:`write_queues`, each with its master's address (cached with them: the
        caller must not change the list)."""
        return self._listed(topic, self.route(topic))[2]

    def _listed(
        self, topic: str, route: registry_pb2.TopicRoute
    ) -> tuple[registry_pb2.TopicRoute, list[MessageQueue], Targets]:
        """The writable queues of ``route`` and their addresses, listed once per route."""
        listed = self._write_queues.get(topic)
        if listed is not None and listed[0] is route:
            return listed
        targets = []
        for data in sorted(route.queues, key=lambda q: q.broker_name):
            address = (
                self.broker_address(route, data.broker_name) if data.perm & PERM_WRITE else None
            )
            if address:
                targets += [
                    (MessageQueue(topic, data.broker_name, q), address)
                    for q in range(data.write_queue_nums)
                ]
        listed = (route, [queue for queue, _ in targets], targets)
        self._write_queues[topic] = listed
        return listed

    def read_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of the topic, sorted (the order rebalancing relies on)."""
        route = self.route(topic)
        queues = []
        for data in route.queues:
            if data.perm & PERM_READ:
                queues += [
                    MessageQueue(topic, data.broker_name, q) for q in range(data.read_queue_nums)
                ]
        return sorted(queues)

    def read_address_of(self, queue: MessageQueue) -> str:
        """Where to pull ``queue`` from: its master, or a replica while the master is down.

        After :meth:`read_from_replica` (the master failed to answer, or told
        a consumer far behind to read elsewhere) the master is skipped for
        ``REPLICA_READS_S``; so is one missing from the route. Replicas serve
        reads (docs/ha.md), so consumers keep going through a failover.
        """
        route = self.route(queue.topic)
        for broker in route.brokers:
            if broker.broker_name != queue.broker_name:
                continue
            down_until = self._master_down.get(queue.broker_name, 0.0)
            replicas = sorted(i for i in broker.addresses if i != MASTER_ID)
            if MASTER_ID in broker.addresses and (not replicas or time.monotonic() >= down_until):
                return broker.addresses[MASTER_ID]
            if replicas:
                return broker.addresses[replicas[0]]
        return self.address_of(queue)

    def read_from_replica(self, broker_name: str) -> None:
        """Read the group's queues from a replica for a while (none: from the master)."""
        self._master_down[broker_name] = time.monotonic() + REPLICA_READS_S

    def address_of(self, queue: MessageQueue, *, master_only: bool = True) -> str:
        address = self.broker_address(
            self.route(queue.topic), queue.broker_name, master_only=master_only
        )
        if address is None:
            self.forget_route(queue.topic)
            raise BrokerUnavailable(f"no live broker {queue.broker_name!r} serves {queue.topic!r}")
        return address

    def known_masters(self) -> set[str]:
        """Addresses of the masters of every broker group a cached route names, and those
        the last :meth:`cluster_brokers` answer named."""
        with self._lock:
            routes = [route for route, _ in self._routes.values()]
            masters = set(self._cluster_masters)
        return masters | {
            broker.addresses[MASTER_ID]
            for route in routes
            for broker in route.brokers
            if MASTER_ID in broker.addresses
        }

    def brokers_of(self, topics: Sequence[str]) -> set[str]:
        """Addresses of every broker serving any of ``topics`` (unknown topics skipped)."""
        addresses: set[str] = set()
        for topic in topics:
            try:
                route = self.route(topic)
            except TopicNotFound:
                continue
            for broker in route.brokers:
                addresses.update(broker.addresses.values())
        return addresses

    # ---------------------------------------------------------------- brokers
    def broker(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        stub = self._stubs.get(address)
        if stub is None:
            with self._lock:
                stub = self._stubs.get(address)
                if stub is None:
                    self._channels[address] = channels.sync_channel(address, self.tls)
                    channel = self._signed(self._channels[address], address)
                    self._pulls[address] = channel.unary_unary(
                        PULL_METHOD,
                        request_serializer=broker_pb2.BrokerPullRequest.SerializeToString,
                    )  # no response deserializer: see pull_encoded
                    self._pull_queues[address] = channel.unary_unary(
                        PULL_QUEUES_METHOD,
                        request_serializer=broker_pb2.BrokerPullQueuesRequest.SerializeToString,
                    )
                    self._sends[address] = channel.unary_unary(
                        SEND_METHOD, response_deserializer=broker_pb2.SendResponse.FromString
                    )  # no request serializer: see send_encoded
                    stub = broker_pb2_grpc.BrokerServiceStub(channel)
                    self._stubs[address] = stub
        return stub

    def await_broker(self, address: str) -> bool:
        """Whether the channel to ``address`` connects within one reconnect backoff
        (:func:`boltmq.kernel.channels.await_connected`)."""
        self.broker(address)
        return channels.await_connected(self._channels[address])

    def send_encoded(self, address: str) -> grpc.UnaryUnaryMultiCallable:
        """SendMessage on the broker at ``address``, taking the SendRequest already
        serialized: the signer digests those bytes and gRPC sends them as they are, so
        a signed send serializes its request once (:mod:`boltmq.kernel.signing`)."""
        self.broker(address)
        return self._sends[address]

    def send_stream(self, address: str) -> SendStream:
        """The send stream to the broker at ``address`` (:mod:`boltmq.send_stream`), signed
        for the group the routes name there."""
        stream = self._send_streams.get(address)
        if stream is None:
            self.broker(address)
            with self._lock:
                stream = self._send_streams.get(address)
                if stream is None:
                    stream = SendStream(
                        self._channels[address],
                        self._stream_in_flight_max,
                        self.credentials,
                        self.client_id,
                        lambda: self.broker_name_at(address),
                    )
                    self._send_streams[address] = stream
        return stream

    def pull_encoded(self, address: str) -> grpc.UnaryUnaryMultiCallable:
        """PullMessage on the broker at ``address``, answering the response's bytes
        unparsed (:func:`boltmq.wire.pull_answer.split_records` sets the records
        aside without copying them)."""
        self.broker(address)
        return self._pulls[address]

    def pull_queues_encoded(self, address: str) -> grpc.UnaryUnaryMultiCallable:
        """PullQueues on the broker at ``address``, answering the response's bytes as the
        store encoded them (:mod:`boltmq.wire.pull_answer`), as :meth:`pull_encoded`."""
        self.broker(address)
        return self._pull_queues[address]

    def _signed(self, channel: grpc.Channel, address: str) -> grpc.Channel:
        """``channel`` with every call signed for the group at ``address`` (read at each
        call: a route refresh may name another group there)."""
        if self.credentials is None:
            return channel
        signer = RequestSigner(
            self.credentials, self.client_id, lambda: self.broker_name_at(address)
        )
        return grpc.intercept_channel(channel, signer)

    def close(self) -> None:
        with self._lock:
            for stream in self._send_streams.values():
                stream.close()
            self._send_streams.clear()
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()
            self._pulls.clear()
            self._pull_queues.clear()
            self._sends.clear()
        self.registry.close()


def is_retryable(exc: grpc.RpcError) -> bool:
    """Transport failures worth another broker: unavailable, timed out, overloaded."""
    code = exc.code() if hasattr(exc, "code") else None
    return code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )


def rpc_error_text(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code else 'ERROR'}: {details}"
