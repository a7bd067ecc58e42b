"""Producers and consumers known through their heartbeats.

Clients heartbeat with the groups they belong to; consumers read the sorted
member list of their group to share its queues out (average allocation), so
every member must see the same order. A client silent for
``client_expiry_ms`` is dropped: reads filter silent clients out at once and
:meth:`ClientManager.expire` forgets them for good when the broker's periodic
scan runs. Time comes from an injected millisecond clock.

Members of one group should subscribe alike. When they do not (other topics,
expressions or expression types), queues shared among them would be filtered
by whichever member got each one, silently dropping what the others wanted.
So the broker does not split the group's queues among them: the member list a
consumer shares queues by (:meth:`ClientManager.allocation_ids`, answered to
GetConsumerList) holds only the members that subscribe as most live members do
(a tie goes to the subscriptions of the member that heartbeated first); the
others get no queues until they subscribe alike (or the others leave). The
change is logged, ``boltmq admin group show`` lists every member's own
subscriptions and marks the excluded ones (:meth:`ClientManager.members`), and
the excluded consumer logs that it got no queues. The group's subscriptions
as a whole (:meth:`ClientManager.consumer_group`) are those of the last
heartbeat, as in RocketMQ.

Each heartbeat also says how the client connects (:class:`ClientInfo`: the
address the broker saw it come from, its language and SDK version); the
broker keeps it per client from its first heartbeat ("since", wall-clock
epoch ms from an injected clock) until the client leaves its last group, and
:meth:`ClientManager.connections` lists a group's live clients with it
(``boltmq admin connections producer|consumer GROUP``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from services.broker.metadata.clock import Clock, monotonic_ms, wall_clock_ms

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
MESSAGE_MODELS = (CLUSTERING, BROADCASTING)

log = logging.getLogger(__name__)

Subscriptions = tuple[tuple[str, str, str], ...]
"""``(topic, expression, expression type)`` triples, sorted (type TAG or SQL92)."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeat:
    """What one heartbeat says about one consumer group."""

    group: str
    model: str = CLUSTERING
    orderly: bool = False
    subscriptions: Subscriptions = ()
    """``(topic, expression, expression type)`` triples."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    """A consumer group as the broker sees it now."""

    group: str
    client_ids: tuple[str, ...]
    model: str
    orderly: bool
    subscriptions: Subscriptions
    """The last heartbeat's."""


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One live member of a consumer group and what its last heartbeat said."""

    client_id: str
    model: str
    subscriptions: Subscriptions


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """How one client connects, as its heartbeats say."""

    address: str = ""
    """``host:port`` the broker saw the heartbeat come from."""
    language: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class Connection:
    """One live client of a group: its connection and, for consumers, what it consumes."""

    client_id: str
    info: ClientInfo
    since_ms: int
    """Wall-clock epoch ms of its first heartbeat at this broker."""
    model: str = ""
    subscriptions: Subscriptions = ()


@dataclass(slots=True)
class _Group:
    last_seen_ms: dict[str, int] = field(default_factory=dict)
    """client id -> time of its last heartbeat."""
    model: str = CLUSTERING
    orderly: bool = False
    subscriptions: Subscriptions = ()
    beats: dict[str, tuple[str, Subscriptions]] = field(default_factory=dict)
    """client id -> (model, subscriptions) of its last heartbeat."""


class ClientManager:
    """Producer and consumer groups with their live members."""

    def __init__(
        self, expiry_ms: int, clock_ms: Clock = monotonic_ms, wall_ms: Clock = wall_clock_ms
    ) -> None:
        self._expiry_ms = expiry_ms
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms
        self._producers: dict[str, dict[str, int]] = {}
        self._consumers: dict[str, _Group] = {}
        self._infos: dict[str, tuple[ClientInfo, int]] = {}
        """client id -> (its last heartbeat's connection, since when it is known)."""

    def heartbeat(
        self,
        client_id: str,
        producer_groups: Iterable[str],
        consumer_groups: Iterable[ConsumerGroupHeartbeat],
        info: ClientInfo | None = None,
    ) -> list[str]:
        """Record a heartbeat; return the consumer groups whose member list changed."""
        now = self._clock_ms()
        known = self._infos.get(client_id)
        since = known[1] if known is not None else self._wall_ms()
        self._infos[client_id] = (info or ClientInfo(), since)
        for group in producer_groups:
            self._producers.setdefault(group, {})[client_id] = now
        changed = []
        for beat in consumer_groups:
            entry = self._consumers.setdefault(beat.group, _Group())
            if client_id not in entry.last_seen_ms:
                changed.append(beat.group)
            entry.last_seen_ms[client_id] = now
            subscriptions = tuple(sorted(set(beat.subscriptions)))
            if subscriptions != entry.subscriptions and len(entry.last_seen_ms) > 1:
                log.warning(
                    "consumer group %s: %s subscribes %s, the group had %s; only the members "
                    "subscribing as most do get queues (members should subscribe alike)",
                    beat.group,
                    client_id,
                    list(subscriptions),
                    list(entry.subscriptions),
                )
            entry.model, entry.orderly = beat.model, beat.orderly
            entry.subscriptions = subscriptions
            entry.beats[client_id] = (beat.model, subscriptions)
        return changed

    def unregister(
        self, client_id: str, producer_groups: Iterable[str], consumer_groups: Iterable[str]
    ) -> list[str]:
        """Remove a client from groups; return the consumer groups it left."""
        for group in producer_groups:
            _remove(self._producers, group, client_id)
        left = []
        for group in consumer_groups:
            entry = self._consumers.get(group)
            if entry is not None and entry.last_seen_ms.pop(client_id, None) is not None:
                entry.beats.pop(client_id, None)
                left.append(group)
                if not entry.last_seen_ms:
                    del self._consumers[group]
        self._forget_gone()
        return left

    def connections(self, group: str, *, producers: bool) -> list[Connection]:
        """Live producer (or consumer) clients of ``group`` with their connections, by id."""
        if producers:
            return [self._connection(c) for c in self.producer_ids(group)]
        return [
            self._connection(m.client_id, m.model, m.subscriptions) for m in self.members(group)
        ]

    def _connection(
        self, client_id: str, model: str = "", subscriptions: Subscriptions = ()
    ) -> Connection:
        info, since = self._infos.get(client_id, (ClientInfo(), 0))
        return Connection(client_id, info, since, model, subscriptions)

    def _forget_gone(self) -> None:
        """Drop the connection of every client left in no group."""
        present = {c for members in self._producers.values() for c in members}
        present.update(c for entry in self._consumers.values() for c in entry.last_seen_ms)
        for client_id in [c for c in self._infos if c not in present]:
            del self._infos[client_id]

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of a consumer group, sorted (every member sees the same order)."""
        entry = self._consumers.get(group)
        return [] if entry is None else self._live(entry.last_seen_ms)

    def allocation_ids(self, group: str) -> list[str]:
        """The live members that share the group's queues, sorted: those subscribing as
        most live members do (a tie: as the member that heartbeated first); every live
        member when they all subscribe alike (module docstring)."""
        entry = self._consumers.get(group)
        members = self.members(group)
        if entry is None or len({m.subscriptions for m in members}) <= 1:
            return [m.client_id for m in members]
        joined = {client_id: n for n, client_id in enumerate(entry.last_seen_ms)}
        by_subscriptions: dict[Subscriptions, list[str]] = {}
        for m in members:
            by_subscriptions.setdefault(m.subscriptions, []).append(m.client_id)
        chosen = max(
            by_subscriptions.values(),
            key=lambda ids: (len(ids), -min(joined[c] for c in ids)),
        )
        return sorted(chosen)

    def producer_ids(self, group: str) -> list[str]:
        """Live members of a producer group, sorted."""
        return self._live(self._producers.get(group, {}))

    def consumer_group(self, group: str) -> ConsumerGroupView | None:
        """The consumer group with its live members, or None when it has none."""
        entry = self._consumers.get(group)
        if entry is None:
            return None
        ids = self._live(entry.last_seen_ms)
        if not ids:
            return None
        return ConsumerGroupView(
            group,
            tuple(ids),
            entry.model,
            entry.orderly,
            entry.subscriptions,
        )

    def members(self, group: str) -> list[GroupMember]:
        """Live members of a consumer group with their own last heartbeat, sorted by id."""
        entry = self._consumers.get(group)
        if entry is None:
            return []
        return [
            GroupMember(client_id, *entry.beats.get(client_id, (entry.model, ())))
            for client_id in self._live(entry.last_seen_ms)
        ]

    def consumer_groups(self) -> list[str]:
        """Consumer groups with at least one live member, sorted."""
        return [g for g in sorted(self._consumers) if self.consumer_ids(g)]

    def expire(self) -> list[tuple[str, str]]:
        """Forget clients silent for too long; return ``(group, client_id)`` of consumers."""
        deadline = self._clock_ms() - self._expiry_ms
        for group in list(self._producers):
            members = self._producers[group]
            for client_id in _silent(members, deadline):
                _remove(self._producers, group, client_id)
        removed = []
        for group in list(self._consumers):
            members = self._consumers[group].last_seen_ms
            for client_id in _silent(members, deadline):
                del members[client_id]
                self._consumers[group].beats.pop(client_id, None)
                removed.append((group, client_id))
            if not members:
                del self._consumers[group]
        self._forget_gone()
        return removed

    def _live(self, members: dict[str, int]) -> list[str]:
        deadline = self._clock_ms() - self._expiry_ms
        return sorted(c for c, seen in members.items() if seen > deadline)


def _silent(members: dict[str, int], deadline_ms: int) -> list[str]:
    return [client_id for client_id, seen in members.items() if seen <= deadline_ms]


def _remove(groups: dict[str, dict[str, int]], group: str, client_id: str) -> None:
    members = groups.get(group)
    if members is not None:
        members.pop(client_id, None)
        if not members:
            del groups[group]
