"""STORE_CALLERS: which component may call which StoreService RPC.

A store serves exactly two callers, both of its own broker group (the group
its own certificate names): the broker in front of it and the HA service
beside it. Everything else, applications included, is refused
(:mod:`boltmq.kernel.internal_gate`):

RPCs                                                              | Callers
------------------------------------------------------------------+-------------
Append, AppendStream, Get, Pull, PullQueues,                      | broker
QueryByKey, OffsetByTime, QueueRange, ListQueues, WatchArrivals,  |
WatchQueues                                                       |
PutConfig, GetConfig (the metadata files, the ACL document among  | broker
them: ``config/plain_acl.json`` holds every secret key)           |
ReadCommitLog, AppendRaw, AppendRawStream, Truncate,              | ha
ReportReplicas                                                    |
GetStoreInfo, SetRole                                             | broker, ha

An RPC missing from the table accepts nobody.
"""

from __future__ import annotations

from typing import Final

from boltmq.kernel.internal_gate import Rule

BROKER: Final = Rule(frozenset({"broker"}))
HA: Final = Rule(frozenset({"ha"}))
BROKER_OR_HA: Final = Rule(frozenset({"broker", "ha"}))

STORE_CALLERS: Final[dict[str, Rule | None]] = {
    **dict.fromkeys(
        (
            "Append",
            "AppendStream",
            "Get",
            "Pull",
            "PullQueues",
            "QueryByKey",
            "OffsetByTime",
            "QueueRange",
            "ListQueues",
            "WatchArrivals",
            "WatchQueues",
            "PutConfig",
            "GetConfig",
        ),
        BROKER,
    ),
    **dict.fromkeys(
        ("ReadCommitLog", "AppendRaw", "AppendRawStream", "Truncate", "ReportReplicas"), HA
    ),
    **dict.fromkeys(("GetStoreInfo", "SetRole"), BROKER_OR_HA),
}
