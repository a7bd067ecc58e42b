"""Client registry: the protocol's live clients (from Heartbeat and Telemetry), by id.

A client names itself in the ``x-mq-client-id`` header of every call. Heartbeat
(every 10 s from the official clients) and Telemetry's Settings record its type, its
consumer group and its subscribed topics; NotifyClientTermination removes it, and so
does silence for ``client_expiry_ms``. ReceiveMessage reads a consumer's FIFO wish
from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

CLIENTS_MAX = 100_000
"""Clients remembered at most (the oldest is forgotten first beyond)."""


@dataclass
class ClientEntry:
    client_id: str
    client_type: int
    group: str = ""
    topics: frozenset[str] = field(default_factory=frozenset)
    fifo: bool = False
    """Its Settings asked for FIFO delivery."""
    seen_s: float = 0.0


class ClientRegistry:
    """Live protocol clients."""

    def __init__(self, expiry_ms: int, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._expiry_s = expiry_ms / 1000
        self._clock_s = clock_s
        self._clients: dict[str, ClientEntry] = {}

    def seen(
        self,
        client_id: str,
        client_type: int,
        group: str = "",
        topics: frozenset[str] | None = None,
        fifo: bool | None = None,
    ) -> None:
        """Record a call of ``client_id`` (its type; its group, topics and FIFO wish when
        known)."""
        entry = self._clients.pop(client_id, None) or ClientEntry(client_id, client_type)
        entry.client_type = client_type or entry.client_type
        entry.group = group or entry.group
        if topics is not None:
            entry.topics = topics
        if fifo is not None:
            entry.fifo = fifo
        now = entry.seen_s = self._clock_s()
        self._clients[client_id] = entry  # the most recently seen last
        horizon = now - self._expiry_s
        while len(self._clients) > CLIENTS_MAX or self._oldest().seen_s < horizon:
            self._clients.pop(self._oldest().client_id)

    def _oldest(self) -> ClientEntry:
        return next(iter(self._clients.values()))

    def forget(self, client_id: str) -> None:
        self._clients.pop(client_id, None)

    def fifo(self, client_id: str) -> bool:
        """Whether the client's Settings asked for FIFO delivery."""
        entry = self._clients.get(client_id)
        return entry is not None and entry.fifo and entry.seen_s >= self._clock_s() - self._expiry_s
