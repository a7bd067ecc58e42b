"""The internal services' caller tables, and how the gate applies one to an identity."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from boltmq.kernel.internal_gate import NOBODY, OPEN, Group, InternalGate, Refused, Rule
from boltmq.kernel.peer_identity import IdentityReader, PeerIdentity
from boltmq.v1 import ha_pb2, registry_pb2, store_pb2
from services.ha.internal_callers import HA_CALLERS
from services.registry.internal_callers import REGISTRY_CALLERS
from services.store.internal_callers import STORE_CALLERS

STORE = store_pb2.DESCRIPTOR.services_by_name["StoreService"]
HA = ha_pb2.DESCRIPTOR.services_by_name["HAService"]
REGISTRY = registry_pb2.DESCRIPTOR.services_by_name["RegistryService"]


def test_every_store_and_ha_rpc_is_in_its_table() -> None:
    assert set(STORE_CALLERS) == {m.name for m in STORE.methods}
    assert set(HA_CALLERS) == {m.name for m in HA.methods}


def test_no_store_rpc_is_open_and_only_the_broker_reads_or_writes_files() -> None:
    assert all(rule is not OPEN and rule.group is Group.OWN for rule in STORE_CALLERS.values())
    for name in ("GetConfig", "PutConfig"):
        rule = STORE_CALLERS[name]
        assert rule is not None and rule.roles == {"broker"}
    replication = ("ReadCommitLog", "AppendRaw", "AppendRawStream", "Truncate", "ReportReplicas")
    for name in replication:
        rule = STORE_CALLERS[name]
        assert rule is not None and rule.roles == {"ha"}


def test_only_the_groups_ha_services_replicate() -> None:
    rule = HA_CALLERS["Replicate"]
    assert rule is not None and rule.roles == {"ha"} and rule.group is Group.OWN
    assert HA_CALLERS["Status"] is OPEN


def gate(own: PeerIdentity) -> InternalGate:
    reader = IdentityReader.__new__(IdentityReader)  # check() never reads a certificate
    return InternalGate("boltmq.v1.StoreService", STORE_CALLERS, reader, own)


@pytest.mark.parametrize(
    ("method", "caller", "allowed"),
    [
        ("GetConfig", PeerIdentity("broker-a", "broker"), True),
        ("GetConfig", PeerIdentity("broker-a", "ha"), False),
        ("GetConfig", PeerIdentity("broker-b", "broker"), False),
        ("GetConfig", PeerIdentity("", "registry"), False),
        ("Truncate", PeerIdentity("broker-a", "ha"), True),
        ("Truncate", PeerIdentity("broker-a", "broker"), False),
        ("SetRole", PeerIdentity("broker-a", "broker"), True),
        ("SetRole", PeerIdentity("broker-a", "ha"), True),
        ("SetRole", PeerIdentity("broker-a", "store"), False),
    ],
)
def test_the_gate_applies_role_and_own_group(
    method: str, caller: PeerIdentity, allowed: bool
) -> None:
    store_gate = gate(PeerIdentity("broker-a", "store"))
    rule = STORE_CALLERS[method]
    assert rule is not None
    full = f"/boltmq.v1.StoreService/{method}"
    if allowed:
        store_gate.check(full, rule, caller, None)
        return
    with pytest.raises(Refused) as refused:
        store_gate.check(full, rule, caller, None)
    assert refused.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert str(refused.value).startswith(f"{caller.uri} may not call {full}: it accepts ")


def test_a_request_group_rule_compares_with_the_request_and_nobody_passes_nobody() -> None:
    registry_gate = gate(PeerIdentity("", "registry"))
    rule = Rule(frozenset({"broker"}), Group.REQUEST)
    broker_a = PeerIdentity("broker-a", "broker")
    registry_gate.check("/m", rule, broker_a, SimpleNamespace(broker_name="broker-a"))
    with pytest.raises(Refused, match="the request's broker group"):
        registry_gate.check("/m", rule, broker_a, SimpleNamespace(broker_name="broker-b"))
    with pytest.raises(Refused, match="accepts no caller"):
        registry_gate.check("/m", NOBODY, broker_a, None)


def test_only_brokers_of_the_named_group_write_to_the_registry() -> None:
    assert set(REGISTRY_CALLERS) == {m.name for m in REGISTRY.methods}
    for name in ("RegisterBroker", "UnregisterBroker"):
        rule = REGISTRY_CALLERS[name]
        assert rule is not None and rule.roles == {"broker"} and rule.group is Group.REQUEST
    for name in ("GetRoute", "GetRoutes", "GetClusterInfo"):
        assert REGISTRY_CALLERS[name] is OPEN
