"""Auto-creation floods across real processes: an application account naming hundreds
of fresh consumer groups, and the production settings where only operators create.

Each fresh group (and a clustering group's ``%RETRY%`` topic) rewrites a metadata
file in the store and re-registers with every registry: the broker caps what one
call and one account may create, and production turns auto-creation off.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from boltmq.cli.main import main
from boltmq.message import Message, ReceivedMessage
from boltmq.producer import Producer
from boltmq.push_consumer import PushConsumer
from boltmq.v1 import broker_pb2
from tests.integration.test_acl import ADMIN, ORDERS, READER, AclCluster, send

SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {  # may consume as any group: the account a flood of new groups would come from
            "accessKey": ORDERS.access_key,
            "secretKey": ORDERS.secret_key,
            "topicPerms": {"orders": "PUB|SUB"},
            "defaultGroupPerm": "SUB",
        },
        {
            "accessKey": READER.access_key,
            "secretKey": READER.secret_key,
            "topicPerms": {"orders": "SUB"},
            "groupPerms": {"reader-group": "SUB"},
        },
    ]
}

BURST = 40


def heartbeat(groups: list[str]) -> broker_pb2.HeartbeatRequest:
    return broker_pb2.HeartbeatRequest(
        client_id="10.0.0.1@1@flood",
        consumer_groups=[
            broker_pb2.ConsumerGroupHeartbeat(
                group=g,
                model="CLUSTERING",
                subscriptions=[broker_pb2.ConsumerSubscription(topic="orders", expression="*")],
            )
            for g in groups
        ],
    )


def refusal(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


def known(cluster: AclCluster) -> tuple[set[str], set[str]]:
    """Groups and topics the broker has, as its admin sees them."""
    admin = cluster.stub(ADMIN)
    groups = {g.group for g in admin.ListGroups(broker_pb2.ListGroupsRequest(), timeout=5).groups}
    topics = {t.name for t in admin.ListTopics(broker_pb2.ListTopicsRequest(), timeout=5).topics}
    return groups, topics


def consume_one(cluster: AclCluster, group: str) -> bytes:
    """Start a push consumer of ``orders`` as ORDERS while sending; the body it gets."""
    got: queue.Queue[bytes] = queue.Queue()

    def listener(messages: list[ReceivedMessage]) -> None:
        for m in messages:
            got.put(bytes(m.body))

    producer = Producer(cluster.registry.address, credentials=ORDERS).start()
    try:
        producer.send(Message(topic="orders", body=b"first"))  # the topic has a route
        consumer = PushConsumer(
            cluster.registry.address, group, {"orders": "*"}, listener, credentials=ORDERS
        )
        consumer.start()
        try:
            assert producer.send(Message(topic="orders", body=b"legit")).status.name == "SEND_OK"
            while (body := got.get(timeout=30)) != b"legit":
                assert body == b"first"
            return body
        finally:
            consumer.shutdown()
    finally:
        producer.shutdown()


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[AclCluster]:
    """ACL on, the default per-call cap, a small burst and next to no refill."""
    cluster = AclCluster(
        tmp_path,
        SEED,
        broker_settings=(
            "auto_create_max_per_call=32",
            f"auto_create_burst={BURST}",
            "auto_create_rate_per_s=0.001",
        ),
    )
    yield cluster
    cluster.stop()


def test_a_heartbeat_naming_hundreds_of_groups_creates_none(limited: AclCluster) -> None:
    flood = [f"flood-{n}" for n in range(256)]
    error = refusal(lambda: limited.stub(ORDERS).Heartbeat(heartbeat(flood), timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "would create 512 topics and consumer groups" in error.details()
    assert "at most 32" in error.details()
    groups, topics = known(limited)
    assert not any(g.startswith("flood-") for g in groups)
    assert not any(t.startswith("%RETRY%flood-") for t in topics)
    # The legitimate path: a consumer joins its group as usual.
    assert consume_one(limited, "orders-consumers") == b"legit"
    assert "orders-consumers" in known(limited)[0]


def test_an_account_creating_group_after_group_runs_out_alone(limited: AclCluster) -> None:
    stub = limited.stub(ORDERS)
    stub.Heartbeat(heartbeat([f"batch-a-{n}" for n in range(16)]), timeout=10)  # 32 of 40
    error = refusal(
        lambda: stub.Heartbeat(heartbeat([f"batch-b-{n}" for n in range(16)]), timeout=10)
    )
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "orders-app may auto-create" in error.details()
    assert not any(g.startswith("batch-b-") for g in known(limited)[0])
    # Groups it already has cost nothing; another account has its own budget.
    stub.Heartbeat(heartbeat([f"batch-a-{n}" for n in range(16)]), timeout=10)
    limited.stub(READER).Heartbeat(heartbeat(["reader-group"]), timeout=10)
    assert "reader-group" in known(limited)[0]


@pytest.fixture
def production(tmp_path: Path) -> Iterator[AclCluster]:
    """The production overlay's broker settings: ACL on, auto-creation off."""
    cluster = AclCluster(
        tmp_path,
        SEED,
        broker_settings=("auto_create_topic_enable=false", "auto_create_subscription_group=false"),
    )
    yield cluster
    cluster.stop()


def test_in_production_only_operators_create_topics_and_groups(production: AclCluster) -> None:
    stub = production.stub(ORDERS)
    error = refusal(lambda: stub.Heartbeat(heartbeat(["orders-consumers"]), timeout=10))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "auto_create_subscription_group is off" in error.details()
    error = refusal(lambda: send(stub, "orders"))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "auto_create_topic_enable is off" in error.details()
    upsert = broker_pb2.UpsertGroupRequest(group="orders-consumers")
    error = refusal(lambda: stub.UpsertGroup(upsert, timeout=5))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert known(production)[0] == set()

    env = {"BOLTMQ_ACCESS_KEY": ADMIN.access_key, "BOLTMQ_SECRET_KEY": ADMIN.secret_key}
    registry = ["--registry", production.registry.address]
    runner = CliRunner()
    made = runner.invoke(main, ["admin", "topic", "create", "orders", *registry], env=env)
    assert made.exit_code == 0, made.output
    made = runner.invoke(main, ["admin", "group", "create", "orders-consumers", *registry], env=env)
    assert made.exit_code == 0, made.output
    assert "group orders-consumers" in made.output and "retry-max-times 16" in made.output
    assert consume_one(production, "orders-consumers") == b"legit"
