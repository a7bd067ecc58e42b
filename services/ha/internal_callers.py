"""HA_CALLERS: which component may call which HAService RPC.

RPC       | Callers
----------+------------------------------------------------------------------
Replicate | HA services of this HA service's own broker group only (a replica
          | streams the whole CommitLog, and under SYNC_MASTER its acks count)
Status    | any caller the TLS handshake accepts (the broker's promotion
          | check, ``boltmq admin ha status``): offsets and lag, no data

An RPC missing from the table accepts nobody (:mod:`boltmq.kernel.internal_gate`).
"""

from __future__ import annotations

from typing import Final

from boltmq.kernel.internal_gate import OPEN, Rule

HA_CALLERS: Final[dict[str, Rule | None]] = {
    "Replicate": Rule(frozenset({"ha"})),
    "Status": OPEN,
}
