"""The Overview page's data: broker groups and members, disk use, and traffic rates.

Members come from the registries (``GetClusterInfo``) and each member's own
``GetBrokerInfo`` (any valid account): role as it runs, epoch, CommitLog end,
disk use; a replica's lag is its master's CommitLog end minus its own (bytes),
as ``boltmq admin cluster`` computes it. The disk watermarks are the stores'
cleanup thresholds the console is told (``--clean-watermark``,
``--force-clean-watermark``; the stores' defaults otherwise).

:func:`rates` sums ``GetTrafficStats`` (admin-only; ``broker: true``: every user
topic of the broker, one call a master) over the masters: messages produced and
consumed over the last minute, per second. The page's chart asks for it every
five seconds and keeps the points of the last ten minutes it saw.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import grpc

from boltmq.client import MASTER_ID
from boltmq.console.calls import ClusterCalls, ConsoleError, denied, error_text
from boltmq.v1 import broker_pb2, registry_pb2

CLEAN_WATERMARK = 75
"""The stores' ``disk_max_used_space_ratio`` default: cleanup starts above it (%)."""
FORCE_CLEAN_WATERMARK = 85
"""The stores' ``disk_space_clean_forcibly_ratio`` default: files go early above it (%)."""
MINUTE_S = 60


@dataclass
class Member:
    """One broker of a group as the page shows it."""

    group: str
    broker_id: int
    role: str
    address: str
    store_role: str = "-"
    epoch: int = 0
    commitlog_end: int = -1
    lag: int | None = None
    disk_used: float | None = None
    disk_full: bool = False
    error: str = ""


def _member(calls: ClusterCalls, live: registry_pb2.BrokerLiveInfo) -> Member:
    member = Member(
        live.broker_name,
        live.broker_id,
        "master" if live.broker_id == MASTER_ID else "replica",
        live.address,
        epoch=live.epoch,
    )
    try:
        info = calls.call(live, "GetBrokerInfo", broker_pb2.GetBrokerInfoRequest())
    except grpc.RpcError as exc:
        member.error = error_text(exc)
        return member
    member.store_role = info.store.broker_role or "-"
    member.epoch = info.store.epoch
    member.commitlog_end = info.store.commitlog_max_offset
    member.disk_used = round(info.store.disk_used_percent, 1)
    member.disk_full = info.store.disk_full
    return member


def members(calls: ClusterCalls) -> list[Member]:
    """Every live member, groups by name, members by id, with their replication lag."""
    rows = calls.in_parallel(lambda live: _member(calls, live), calls.members())
    ends = {m.group: m.commitlog_end for m in rows if m.role == "master" and m.commitlog_end >= 0}
    for m in rows:
        if m.role == "replica" and m.commitlog_end >= 0 and m.group in ends:
            m.lag = max(0, ends[m.group] - m.commitlog_end)
    return rows


def rates(calls: ClusterCalls) -> dict[str, Any]:
    """``{"t": epoch s, "produced": msg/s, "consumed": msg/s}`` over the last minute and
    every master (one ``GetTrafficStats`` with ``broker: true`` each), or ``{"error": why}``
    (an account that may not read traffic, a broker that failed)."""
    produced = consumed = 0
    try:
        answers = calls.each("GetTrafficStats", broker_pb2.GetTrafficStatsRequest(broker=True))
    except ConsoleError as exc:
        return {"error": str(exc)}
    for _, answer in answers:
        if isinstance(answer, grpc.RpcError):
            if denied(answer):
                return {"error": "traffic rates need an admin account"}
            return {"error": f"GetTrafficStats: {error_text(answer)}"}
        produced += answer.produced.last_minute
        consumed += answer.consumed.last_minute
    return {
        "t": round(time.time(), 3),
        "produced": round(produced / MINUTE_S, 3),
        "consumed": round(consumed / MINUTE_S, 3),
    }
