"""ReplicaTracker: how far each replica has acknowledged the master's CommitLog.

The store knows its replicas only through the HA service beside it, which
reports every replica's acked offset (its CommitLog end) over ReportReplicas.
SYNC_MASTER appends wait here (``docs/ha.md``):

- SLAVE_NOT_AVAILABLE at once when no connected replica is within
  ``ha_max_gap_not_in_sync_bytes`` of the master's end;
- otherwise the append waits until some replica has acked past its end, and
  gets FLUSH_SLAVE_TIMEOUT after ``slave_timeout_ms``.

The gate holds the best acked offset of the connected replicas; one ack from
any replica is enough, as in RocketMQ.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from services.store.offset_gate import OffsetGate

REPLICAS_MAX = 64
"""Replicas tracked at most (a report from one more is ignored)."""


@dataclass
class ReplicaAck:
    """One replica's last report."""

    address: str
    acked_offset: int
    last_report_ms: int
    caught_up_at_ms: int
    """Wall clock when the replica last had everything the master had (lag 0)."""


class ReplicaTracker:
    """Acked offsets per replica, and the gate SYNC_MASTER appends wait on."""

    def __init__(self) -> None:
        self.gate = OffsetGate()
        self._lock = threading.Lock()
        self._acks: dict[str, ReplicaAck] = {}

    def report(self, address: str, acked_offset: int, master_max_offset: int) -> None:
        """A replica's CommitLog end; releases appends it now covers."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            ack = self._acks.get(address)
            if ack is None:
                if len(self._acks) >= REPLICAS_MAX:
                    return
                ack = self._acks[address] = ReplicaAck(address, acked_offset, now_ms, now_ms)
            ack.acked_offset = acked_offset
            ack.last_report_ms = now_ms
            if acked_offset >= master_max_offset:
                ack.caught_up_at_ms = now_ms
        self.gate.advance(acked_offset)

    def forget(self, address: str) -> None:
        """The replica's stream ended: it no longer counts as in sync."""
        with self._lock:
            self._acks.pop(address, None)

    def best_acked(self) -> int | None:
        """The furthest acked offset of a connected replica; None when none is connected."""
        with self._lock:
            return max((a.acked_offset for a in self._acks.values()), default=None)

    def in_sync(self, master_max_offset: int, max_gap_bytes: int) -> bool:
        """Whether some connected replica is within ``max_gap_bytes`` of the master's end."""
        best = self.best_acked()
        return best is not None and master_max_offset - best <= max_gap_bytes

    def snapshot(self) -> list[ReplicaAck]:
        """Copies of every replica's state, by address."""
        with self._lock:
            return [
                ReplicaAck(a.address, a.acked_offset, a.last_report_ms, a.caught_up_at_ms)
                for _, a in sorted(self._acks.items())
            ]

    def reset(self, offset: int) -> None:
        """After a role change: forget every replica and restart the gate at ``offset``."""
        with self._lock:
            self._acks.clear()
        self.gate.close()
        self.gate.reset(offset)
