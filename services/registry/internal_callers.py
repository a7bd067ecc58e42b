"""REGISTRY_CALLERS: which component may call which RegistryService RPC.

RPC                               | Callers
----------------------------------+-----------------------------------------------
RegisterBroker, UnregisterBroker  | a broker of the group the request names
                                  | (``broker_name``): a fake or foreign broker would
                                  | take a share of a topic's queues, or drop the
                                  | real one
GetRoute, GetRoutes,              | any caller the TLS handshake accepts
GetClusterInfo                    | (applications, CLI, brokers, HA services)

Only brokers register (HA services only read routes). An RPC missing from the
table accepts nobody (:mod:`boltmq.kernel.internal_gate`).
"""

from __future__ import annotations

from typing import Final

from boltmq.kernel.internal_gate import OPEN, Group, Rule

GROUP_BROKER: Final = Rule(frozenset({"broker"}), Group.REQUEST)

REGISTRY_CALLERS: Final[dict[str, Rule | None]] = {
    "RegisterBroker": GROUP_BROKER,
    "UnregisterBroker": GROUP_BROKER,
    "GetRoute": OPEN,
    "GetRoutes": OPEN,
    "GetClusterInfo": OPEN,
}
