"""The master side's view of its replicas: acked offset, lag in bytes and in seconds.

Fed by the Replicate streams (every report) and by the role watcher (the
store's max offset every poll); read by Status and the lag metrics. Lag in
seconds counts from the moment the replica last had everything the master had
(RocketMQ's "slave fall behind" time), so a replica that keeps up under load
shows 0 even though a few bytes are always in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from boltmq.v1 import store_pb2


@dataclass(slots=True)
class _Replica:
    session: int
    acked_offset: int
    last_report_ms: int
    caught_up_at_s: float
    """Monotonic time at which the replica last had the master's whole CommitLog."""


@dataclass(frozen=True, slots=True)
class ReplicaLag:
    """One replica as Status and the metrics show it."""

    replica_address: str
    acked_offset: int
    lag_bytes: int
    lag_seconds: float
    last_report_ms: int

    def to_proto(self) -> store_pb2.ReplicaState:
        """The wire form (``ReplicaState``)."""
        return store_pb2.ReplicaState(
            replica_address=self.replica_address,
            acked_offset=self.acked_offset,
            lag_bytes=self.lag_bytes,
            lag_seconds=self.lag_seconds,
            last_report_ms=self.last_report_ms,
        )


class ConnectedReplicas:
    """Progress of every replica connected to this master, by replica address.

    Not the store's own record of replica acks, which SYNC_MASTER appends wait
    on: the store learns the acks from here through ReportReplicas
    (:mod:`services.ha.progress`).

    A replica that reconnects before its old stream noticed the break has two
    sessions for a moment; each stream holds a session number and only the
    newest one's reports and disconnect count.
    """

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._monotonic = monotonic
        self._wall_ms = wall_ms
        self._replicas: dict[str, _Replica] = {}
        self._sessions = 0
        self.master_max_offset = 0
        """The master store's CommitLog end, as last seen."""

    def note_master_max(self, offset: int) -> None:
        """The master's CommitLog end moved (or was read again)."""
        self.master_max_offset = max(self.master_max_offset, offset)

    def open(self, address: str, acked_offset: int) -> int:
        """A replica connected; returns the session number its reports must carry."""
        self._sessions += 1
        now = self._monotonic()
        self._replicas[address] = _Replica(self._sessions, acked_offset, self._wall_ms(), now)
        self.report(address, self._sessions, acked_offset)
        return self._sessions

    def report(self, address: str, session: int, acked_offset: int) -> bool:
        """A report from the replica; False when the session is no longer current."""
        replica = self._replicas.get(address)
        if replica is None or replica.session != session:
            return False
        replica.acked_offset = acked_offset
        replica.last_report_ms = self._wall_ms()
        if acked_offset >= self.master_max_offset:
            replica.caught_up_at_s = self._monotonic()
        return True

    def close(self, address: str, session: int) -> bool:
        """The replica's stream ended; False when a newer session already replaced it."""
        replica = self._replicas.get(address)
        if replica is None or replica.session != session:
            return False
        del self._replicas[address]
        return True

    def clear(self) -> None:
        """Forget every replica (the store stopped being a master)."""
        self._replicas.clear()

    def acked_offsets(self) -> dict[str, int]:
        """Address -> acked offset of every current replica."""
        return {address: r.acked_offset for address, r in self._replicas.items()}

    def lags(self) -> list[ReplicaLag]:
        """Every current replica's lag, by address."""
        now = self._monotonic()
        master_max = self.master_max_offset
        result = []
        for address in sorted(self._replicas):
            replica = self._replicas[address]
            lag_bytes = max(0, master_max - replica.acked_offset)
            lag_seconds = 0.0 if lag_bytes == 0 else max(0.0, now - replica.caught_up_at_s)
            result.append(
                ReplicaLag(
                    address, replica.acked_offset, lag_bytes, lag_seconds, replica.last_report_ms
                )
            )
        return result
