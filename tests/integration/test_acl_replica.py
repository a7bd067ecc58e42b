"""A replica broker copies its master's metadata when the master enforces the ACL.

A :class:`~boltmq.cli.dev.local_cluster.LocalCluster` group (registry; master and
replica, each a store, its HA service and its broker) whose brokers both run
with ``acl_enable`` and the same ACL seed file. GetMetadata is an admin call,
so the replica signs its copies with the ``access_key`` / ``secret_key`` of
an admin account; without credentials, or with an account that is not an
admin, the master refuses every copy, both logs say so, and the replica keeps
serving what it has. LocalCluster gives every broker the same settings: the
master holds the credentials too, and never uses them (only replicas copy). The copy
itself is described in docs/ha.md ("Reads and metadata while the master is down").
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster, Member
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import Credentials, RequestSigner
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2, store_pb2, store_pb2_grpc
from services.broker.metadata.subscription_group import SUBSCRIPTION_GROUP_FILE
from tests.integration.conftest import CLUSTER_REGISTRY_SETTINGS
from tests.integration.test_failover import (
    BROKER_SETTINGS,  # metadata_sync_interval_ms=300: a copy every 0.3 s
    HA_SETTINGS,
    STORE_SETTINGS,
    wait_for,
)

ADMIN = Credentials("admin-key", "admin-secret-1")
APP = Credentials("orders-app", "orders-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": APP.access_key,
            "secretKey": APP.secret_key,
            "topicPerms": {"orders": "PUB|SUB"},
            "groupPerms": {"orders-group": "SUB"},
        },
    ]
}
TOPIC = "orders"
GROUP = "orders-group"
COMMITTED = 7
GET_METADATA = "/boltmq.v1.BrokerService/GetMetadata"


def start_group(tmp_path: Path, credentials: Credentials | None) -> LocalCluster:
    """Master + replica, both enforcing the same ACL; brokers sign with ``credentials``."""
    seed = tmp_path / "acl.json"
    seed.write_text(json.dumps(SEED))
    signing = (
        (f"access_key={credentials.access_key}", f"secret_key={credentials.secret_key}")
        if credentials
        else ()
    )
    spec = ClusterSpec(
        tmp_path,
        replicas=1,
        store_settings=STORE_SETTINGS,
        broker_settings=(*BROKER_SETTINGS, "acl_enable=true", f"acl_file={seed}", *signing),
        ha_settings=HA_SETTINGS,
        registry_settings=CLUSTER_REGISTRY_SETTINGS,
    )
    return LocalCluster(spec).start()


def broker_of(member: Member) -> ServiceProcess:
    assert member.broker is not None
    return member.broker


def broker_stub(member: Member) -> broker_pb2_grpc.BrokerServiceStub:
    """A stub on the member's broker, every call signed by the admin account."""
    channel = grpc.intercept_channel(
        sync_channel(broker_of(member).address), RequestSigner(ADMIN, "acl-replica-test")
    )
    return broker_pb2_grpc.BrokerServiceStub(channel)


def write_metadata(master: broker_pb2_grpc.BrokerServiceStub) -> None:
    """A topic, and a committed offset of a group (auto-created by the commit)."""
    master.UpsertTopic(
        broker_pb2.UpsertTopicRequest(
            topic=registry_pb2.TopicConfig(
                name=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6
            )
        ),
        timeout=5,
    )
    master.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(
            group=GROUP, topic=TOPIC, queue_id=1, offset=COMMITTED
        ),
        timeout=5,
    )


def topics(stub: broker_pb2_grpc.BrokerServiceStub) -> set[str]:
    return {t.name for t in stub.ListTopics(broker_pb2.ListTopicsRequest(), timeout=5).topics}


def committed(stub: broker_pb2_grpc.BrokerServiceStub) -> int:
    response = stub.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group=GROUP, topic=TOPIC, queue_id=1), timeout=5
    )
    return response.offset if response.found else -1


def first_line(proc: ServiceProcess, text: str) -> str:
    """The first line of the process's log holding ``text``."""
    return next(line for line in proc.log().splitlines() if text in line)


def store_config(member: Member, name: str) -> bytes:
    """A metadata document as the member's store holds it on disk."""
    with sync_channel(member.store.address) as channel:
        response = store_pb2_grpc.StoreServiceStub(channel).GetConfig(
            store_pb2.GetConfigRequest(name=name), timeout=5
        )
    return response.content if response.found else b""


def test_a_replica_signed_as_an_admin_copies_the_masters_metadata(tmp_path: Path) -> None:
    group = start_group(tmp_path, ADMIN)
    try:
        master, replica = group.members
        master_stub, replica_stub = broker_stub(master), broker_stub(replica)
        assert (
            replica_stub.GetBrokerInfo(broker_pb2.GetBrokerInfoRequest(), timeout=5).broker_id == 1
        )
        write_metadata(master_stub)
        assert TOPIC not in topics(replica_stub)

        wait_for(
            lambda: TOPIC in topics(replica_stub) and committed(replica_stub) == COMMITTED,
            "the replica serves the topic and the offset committed on the master",
        )
        groups = replica_stub.ListGroups(broker_pb2.ListGroupsRequest(), timeout=5).groups
        assert GROUP in {g.group for g in groups}
        # The group's settings were copied and saved in the replica's own store.
        copied, original = (
            json.loads(store_config(m, SUBSCRIPTION_GROUP_FILE))["subscriptionGroupTable"]
            for m in (replica, master)
        )
        assert GROUP in copied and copied == original
        assert "cannot copy" not in broker_of(replica).log()
        assert "GetMetadata" not in broker_of(master).log()
        # An account added on the master reaches the replica's store (sealed on the way).
        master_stub.UpdateAcl(
            broker_pb2.UpdateAclRequest(
                upsert_account_json='{"accessKey": "late-app", "secretKey": "late-secret-1"}'
            ),
            timeout=5,
        )
        wait_for(
            lambda: b"late-secret-1" in store_config(replica, "plain_acl.json"),
            "the replica's store holds the account added on the master",
        )
    finally:
        group.stop()


@pytest.mark.parametrize(
    ("credentials", "status", "reason"),
    [
        (None, "UNAUTHENTICATED", "no credentials"),
        (APP, "PERMISSION_DENIED", "GetMetadata needs an admin account; orders-app is not one"),
    ],
    ids=["no-credentials", "not-an-admin"],
)
def test_a_replica_without_admin_credentials_is_refused_and_says_so(
    tmp_path: Path, credentials: Credentials | None, status: str, reason: str
) -> None:
    group = start_group(tmp_path, credentials)
    try:
        master, replica = (broker_of(m) for m in group.members)
        write_metadata(broker_stub(group.members[0]))

        wait_for(
            lambda: f"refused {GET_METADATA}" in master.log(), "the master logs the refused copy"
        )
        refusal = first_line(master, f"refused {GET_METADATA}")
        assert f"{status}: {reason}" in refusal
        wait_for(lambda: "cannot copy" in replica.log(), "the replica logs the failed copy")
        failure = first_line(replica, "cannot copy")
        assert f"master broker {master.address} failed: {status}: {reason}" in failure
        assert "needs an admin account's credentials: set this broker's access_key" in failure
        assert not any(
            secret in replica.log() + master.log() for secret in (ADMIN.secret_key, APP.secret_key)
        )

        # The replica keeps running and serving; it just has none of the master's metadata.
        replica_stub = broker_stub(group.members[1])
        assert replica.alive()
        assert (
            replica_stub.GetBrokerInfo(broker_pb2.GetBrokerInfoRequest(), timeout=5).broker_id == 1
        )
        assert TOPIC not in topics(replica_stub)
        # Refused round after round, logged once: the master refuses again meanwhile.
        refusals = master.log().count(f"refused {GET_METADATA}")
        wait_for(
            lambda: master.log().count(f"refused {GET_METADATA}") > refusals,
            "another refused round",
        )
        assert replica.log().count("cannot copy") == 1
    finally:
        group.stop()
