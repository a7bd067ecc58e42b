"""The registry's in-memory state: live brokers and the routes they serve.

Every broker registers every 30 s with every registry, sending who it is
(:class:`BrokerMember`: cluster name, broker name, broker id, address), its
HA address, its whole topic set and a data version. A registration *replaces*
what the registry held for that broker, so a topic the broker deleted
disappears with the next registration. A broker silent for longer than
``broker_expiry_ms`` is dropped together with its routes.

A broker group is one master (broker id 0) plus replicas paired by broker
name. A route for a topic has one queue entry per group that serves it; the
group's queue numbers and permission come from the master's registration, or
from the member with the lowest id when no master is alive. The master is
authoritative while alive: a topic it no longer lists is not routed even if a
replica still lists it, because replicas copy the master's topics and catch up.

The table is pure: time comes from injected clocks and nothing here touches
the network. It is not thread-safe; the servicer calls it from one event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from boltmq.wire.topic import TOPIC_MAX_LENGTH, InvalidTopic, is_topic, validate_topic
from services.registry.errors import InvalidRequest

log = logging.getLogger(__name__)

MASTER_ID = 0
"""Broker id of a group's master; replicas have ids above 0."""
PERM_MAX = 7
"""READ 4 | WRITE 2 | INHERIT 1."""
QUEUE_NUMS_MAX = 65_536
"""Largest read/write queue count accepted for one topic on one broker."""
PORT_MAX = 65535
ROUTES_PER_CALL_MAX = 4096
"""Topics one GetRoutes call may name."""

Clock = Callable[[], int]
"""A clock in milliseconds."""


def monotonic_ms() -> int:
    """Milliseconds from the monotonic clock (expiry never jumps with the wall clock)."""
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """Milliseconds since the epoch (what operators read as ``last_update_ms``)."""
    return time.time_ns() // 1_000_000


def _check_name(field_name: str, value: str) -> None:
    """Cluster and broker names become topic names on the broker, so the topic rules apply
    (:mod:`boltmq.wire.topic`)."""
    if not value:
        raise InvalidRequest(field_name, "must not be empty")
    if not is_topic(value):
        raise InvalidRequest(
            field_name,
            f"{value[:60]!r} must be at most {TOPIC_MAX_LENGTH} "
            f"letters, digits, '%', '|', '_' or '-'",
        )


def _check_address(field_name: str, value: str) -> None:
    """``host:port`` with a non-empty host and a port in 1..65535 (``[::1]:port`` for IPv6)."""
    if not value:
        raise InvalidRequest(field_name, "must not be empty")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= PORT_MAX:
        raise InvalidRequest(field_name, f"{value[:80]!r} is not host:port")


@dataclass(frozen=True, slots=True)
class BrokerMember:
    """One member of a broker group: the key ``(cluster_name, broker_name, broker_id)``
    plus its address (the broker process a route points at)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    address: str

    def __post_init__(self) -> None:
        _check_name("cluster_name", self.cluster_name)
        _check_name("broker_name", self.broker_name)
        if self.broker_id < 0:
            raise InvalidRequest("broker_id", f"must not be negative, got {self.broker_id}")
        _check_address("address", self.address)

    @property
    def key(self) -> tuple[str, str, int]:
        """The table key; the address may change when a broker restarts elsewhere."""
        return (self.cluster_name, self.broker_name, self.broker_id)


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """One topic as a broker registers it (its topics.json entry)."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool = False


def _check_topic(index: int, topic: TopicSettings) -> None:
    prefix = f"topics[{index}]"
    try:
        validate_topic(topic.name)
    except InvalidTopic as exc:
        raise InvalidRequest(f"{prefix}.name", str(exc)) from None
    for name, value in (
        ("read_queue_nums", topic.read_queue_nums),
        ("write_queue_nums", topic.write_queue_nums),
    ):
        if not 0 <= value <= QUEUE_NUMS_MAX:
            raise InvalidRequest(f"{prefix}.{name}", f"must be 0..{QUEUE_NUMS_MAX}, got {value}")
    if not 0 <= topic.perm <= PERM_MAX:
        raise InvalidRequest(f"{prefix}.perm", f"must be 0..{PERM_MAX}, got {topic.perm}")


@dataclass(frozen=True, slots=True)
class Registration:
    """A broker's full registration; constructing one validates every field."""

    member: BrokerMember
    ha_address: str = ""
    topics: tuple[TopicSettings, ...] = ()
    data_version: int = 0
    epoch: int = 0
    """Master epoch of the broker's store: a newer epoch's master wins id 0 (docs/ha.md)."""
    topics_by_name: Mapping[str, TopicSettings] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ha_address:
            _check_address("ha_address", self.ha_address)
        if self.epoch < 0:
            raise InvalidRequest("epoch", f"must not be negative, got {self.epoch}")
        by_name: dict[str, TopicSettings] = {}
        for index, topic in enumerate(self.topics):
            _check_topic(index, topic)
            if topic.name in by_name:
                raise InvalidRequest(f"topics[{index}].name", f"{topic.name!r} is repeated")
            by_name[topic.name] = topic
        object.__setattr__(self, "topics_by_name", by_name)


@dataclass(frozen=True, slots=True)
class BrokerLive:
    """What the registry knows of one live broker (cluster info)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str
    last_update_ms: int
    """Wall-clock time of the last registration, ms since the epoch."""
    data_version: int
    topic_count: int
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Superseded:
    """A master registration refused: a live master of a newer epoch holds id 0."""

    master: BrokerLive
    suggested_broker_id: int
    """The smallest replica id free in the group: register again with it."""


@dataclass(frozen=True, slots=True)
class QueueRoute:
    """One broker group's queues of a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True, slots=True)
class BrokerRoute:
    """Where one broker group's live members are: ``{broker_id: address}``."""

    cluster_name: str
    broker_name: str
    addresses: Mapping[int, str]


@dataclass(frozen=True, slots=True)
class Route:
    """A topic's route: queues and broker addresses per group, sorted by broker name."""

    topic: str
    queues: tuple[QueueRoute, ...]
    brokers: tuple[BrokerRoute, ...]
    order: bool


@dataclass(slots=True)
class _Entry:
    registration: Registration
    seen_ms: int
    """Monotonic time of the last registration (drives expiry)."""
    updated_wall_ms: int


def _group_settings(members: Mapping[int, _Entry], topic: str) -> TopicSettings | None:
    """The topic's settings for one group: the master's when alive, else the lowest id's."""
    master = members.get(MASTER_ID)
    if master is not None:
        return master.registration.topics_by_name.get(topic)
    for broker_id in sorted(members):
        settings = members[broker_id].registration.topics_by_name.get(topic)
        if settings is not None:
            return settings
    return None


def _check_lookup(field_name: str, topic: str) -> None:
    try:
        validate_topic(topic)
    except InvalidTopic as exc:
        raise InvalidRequest(field_name, str(exc)) from None


def _route(topic: str, groups: Mapping[tuple[str, str], Mapping[int, _Entry]]) -> Route | None:
    """The topic's route over the live ``groups`` (:func:`_groups`); None if none serves it."""
    queues: list[QueueRoute] = []
    brokers: list[BrokerRoute] = []
    order = False
    for (cluster_name, broker_name), members in groups.items():
        settings = _group_settings(members, topic)
        if settings is None:
            continue
        queues.append(
            QueueRoute(
                broker_name, settings.read_queue_nums, settings.write_queue_nums, settings.perm
            )
        )
        addresses = {
            broker_id: entry.registration.member.address for broker_id, entry in members.items()
        }
        brokers.append(BrokerRoute(cluster_name, broker_name, addresses))
        order = order or settings.order
    if not queues:
        return None
    return Route(topic, tuple(queues), tuple(brokers), order)


def _groups(entries: Iterable[_Entry]) -> dict[tuple[str, str], dict[int, _Entry]]:
    """Live entries grouped by ``(cluster_name, broker_name)``, groups in sorted order."""
    groups: dict[tuple[str, str], dict[int, _Entry]] = {}
    for entry in sorted(entries, key=lambda e: e.registration.member.key):
        member = entry.registration.member
        group = groups.setdefault((member.cluster_name, member.broker_name), {})
        group[member.broker_id] = entry
    return groups


class RouteTable:
    """Live brokers by ``(cluster_name, broker_name, broker_id)`` and the routes they serve."""

    def __init__(
        self, broker_expiry_ms: int, clock_ms: Clock = monotonic_ms, wall_clock_ms: Clock = wall_ms
    ) -> None:
        if broker_expiry_ms <= 0:
            raise ValueError("broker_expiry_ms must be positive")
        self._broker_expiry_ms = broker_expiry_ms
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self._brokers: dict[tuple[str, str, int], _Entry] = {}
        self._keys_by_address: dict[str, tuple[str, str, int]] = {}

    def __len__(self) -> int:
        """Brokers held, expired ones included until the next expiry pass."""
        return len(self._brokers)

    def superseded(self, registration: Registration) -> Superseded | None:
        """Why ``registration`` may not take id 0, or None when it may.

        A master of the same group at another address with a newer epoch wins:
        an old master coming back after a failover must not take the group's
        writes back. Equal epochs replace (a master that moved address).
        """
        member = registration.member
        if member.broker_id != MASTER_ID:
            return None
        self.expire()
        current = self._brokers.get(member.key)
        if (
            current is None
            or current.registration.member.address == member.address
            or current.registration.epoch <= registration.epoch
        ):
            return None
        used = {
            key[2] for key in self._brokers if key[:2] == (member.cluster_name, member.broker_name)
        }
        free = next(i for i in range(1, len(used) + 2) if i not in used)
        return Superseded(_live(current), free)

    def register(self, registration: Registration) -> bool:
        """Store or replace a broker's registration; True when the broker was not known.

        Call :meth:`superseded` first: a refused master must not be stored.

        An address belongs to one broker process, so another key holding the
        same address is dropped: a replica promoted to master re-registers as
        id 0 from its old address, and its id-1 entry must not linger.

        The data version is stored, not compared: a restarted broker may start
        its counter again, and refusing a lower version would hide it for good.
        """
        member = registration.member
        key = member.key
        other_key = self._keys_by_address.get(member.address)
        if other_key is not None and other_key != key:
            self._remove(other_key)
        previous = self._brokers.get(key)
        if previous is not None and previous.registration.member.address != member.address:
            self._keys_by_address.pop(previous.registration.member.address, None)
        self._brokers[key] = _Entry(registration, self._clock_ms(), self._wall_clock_ms())
        self._keys_by_address[member.address] = key
        return previous is None

    def unregister(self, member: BrokerMember) -> bool:
        """Drop a broker; True when it was there at that address.

        A different address under the same key means the broker already came
        back elsewhere; a late goodbye from the old process must not remove it.
        """
        entry = self._brokers.get(member.key)
        if entry is None or entry.registration.member.address != member.address:
            return False
        self._remove(member.key)
        return True

    def expire(self) -> list[BrokerLive]:
        """Drop every broker silent for longer than ``broker_expiry_ms``; return them."""
        now_ms = self._clock_ms()
        expired = [
            key
            for key, entry in self._brokers.items()
            if now_ms - entry.seen_ms > self._broker_expiry_ms
        ]
        dropped = [_live(self._brokers[key]) for key in expired]
        for key in expired:
            self._remove(key)
        for broker in dropped:
            log.warning(
                "broker %s/%s/%d at %s expired (silent > %d ms), routes dropped",
                broker.cluster_name,
                broker.broker_name,
                broker.broker_id,
                broker.address,
                self._broker_expiry_ms,
            )
        return dropped

    def get_route(self, topic: str) -> Route | None:
        """The topic's route over live brokers, or None when no live broker serves it."""
        _check_lookup("topic", topic)
        self.expire()
        return _route(topic, _groups(self._brokers.values()))

    def get_routes(self, topics: Sequence[str]) -> tuple[list[Route], list[str]]:
        """The routes of ``topics`` (each name once, in order) and the names no live
        broker serves; InvalidRequest naming ``topics[i]`` for a bad name, or for
        none or more than ROUTES_PER_CALL_MAX names."""
        if not 0 < len(topics) <= ROUTES_PER_CALL_MAX:
            raise InvalidRequest(
                "topics", f"{len(topics)} topics; 1..{ROUTES_PER_CALL_MAX} in one call"
            )
        for index, topic in enumerate(topics):
            _check_lookup(f"topics[{index}]", topic)
        self.expire()
        groups = _groups(self._brokers.values())
        routes: list[Route] = []
        missing: list[str] = []
        for topic in dict.fromkeys(topics):
            route = _route(topic, groups)
            if route is None:
                missing.append(topic)
            else:
                routes.append(route)
        return routes, missing

    def cluster_info(self) -> list[BrokerLive]:
        """Every live broker, sorted by ``(cluster_name, broker_name, broker_id)``."""
        self.expire()
        return [_live(self._brokers[key]) for key in sorted(self._brokers)]

    def _remove(self, key: tuple[str, str, int]) -> None:
        entry = self._brokers.pop(key)
        address = entry.registration.member.address
        if self._keys_by_address.get(address) == key:
            del self._keys_by_address[address]


def _live(entry: _Entry) -> BrokerLive:
    registration = entry.registration
    member = registration.member
    return BrokerLive(
        member.cluster_name,
        member.broker_name,
        member.broker_id,
        member.address,
        registration.ha_address,
        entry.updated_wall_ms,
        registration.data_version,
        len(registration.topics),
        registration.epoch,
    )
