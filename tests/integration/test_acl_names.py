"""Names with a trailing newline, sent by an ordinary account to a broker with the ACL on.

``G\\n`` once passed the broker's name check (``re.match`` with ``$``) but not the
registry's: one Heartbeat created ``%RETRY%G\\n``, and from then on every registration the
broker made (restarts included) was refused. Broker, registry and store now share one
rule, so such names are refused where they arrive and nothing derived from them is made.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, registry_pb2, registry_pb2_grpc
from tests.integration import test_acl
from tests.integration.test_acl import ADMIN, ORDERS, AclCluster, send

acl_cluster = test_acl.acl_cluster


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def heartbeat(cluster: AclCluster, group: str, topic: str = "orders") -> None:
    """A heartbeat as the admin: no ACL refusal stands before the name rule (an ordinary
    account holds no right on a group it was not given, and is refused before)."""
    request = broker_pb2.HeartbeatRequest(
        client_id="names-test",
        consumer_groups=[
            broker_pb2.ConsumerGroupHeartbeat(
                group=group,
                model="CLUSTERING",
                subscriptions=[broker_pb2.ConsumerSubscription(topic=topic, expression="*")],
            )
        ],
    )
    cluster.stub(ADMIN).Heartbeat(request, timeout=5)


def registry(cluster: AclCluster) -> registry_pb2_grpc.RegistryServiceStub:
    return registry_pb2_grpc.RegistryServiceStub(sync_channel(cluster.registry.address))


def routed(cluster: AclCluster, topic: str) -> bool:
    """True once the registry routes ``topic`` (the broker registered it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            registry(cluster).GetRoute(registry_pb2.GetRouteRequest(topic=topic), timeout=5)
            return True
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        time.sleep(0.1)
    return False


def topics_of(cluster: AclCluster) -> set[str]:
    listed = cluster.stub(ADMIN).ListTopics(broker_pb2.ListTopicsRequest(), timeout=5)
    return {t.name for t in listed.topics}


def upsert(cluster: AclCluster, name: str) -> None:
    topic = registry_pb2.TopicConfig(name=name, read_queue_nums=1, write_queue_nums=1, perm=6)
    cluster.stub(ADMIN).UpsertTopic(broker_pb2.UpsertTopicRequest(topic=topic), timeout=5)


def test_a_group_with_a_newline_is_refused_and_registration_keeps_working(
    acl_cluster: AclCluster,
) -> None:
    error = rpc_error(lambda: heartbeat(acl_cluster, "G\n"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "consumer_groups[0].group: group 'G\\n' may only use" in error.details()
    assert not any(name.startswith("%RETRY%G") for name in topics_of(acl_cluster))

    heartbeat(acl_cluster, "G")  # the legitimate group: its retry topic is made and registered
    assert "%RETRY%G" in topics_of(acl_cluster)
    assert routed(acl_cluster, "%RETRY%G")
    upsert(acl_cluster, "after-attack")
    assert routed(acl_cluster, "after-attack")
    acl_cluster.restart_broker()
    upsert(acl_cluster, "after-restart")
    assert routed(acl_cluster, "after-restart")


def test_a_topic_with_a_newline_is_refused_on_send_and_registration(
    acl_cluster: AclCluster,
) -> None:
    error = rpc_error(lambda: send(acl_cluster.stub(ORDERS), "orders\n"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED  # not the topic it may publish to
    assert "orders-app has DENY on topic 'orders\\n'" in error.details()
    # An admin passes every ACL check: the name rule alone stops it.
    error = rpc_error(lambda: send(acl_cluster.stub(ADMIN), "orders\n"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "topic 'orders\\n' may only use" in error.details()
    topic = registry_pb2.TopicConfig(name="T\n", read_queue_nums=1, write_queue_nums=1, perm=6)
    refused = rpc_error(
        lambda: acl_cluster.stub(ADMIN).UpsertTopic(
            broker_pb2.UpsertTopicRequest(topic=topic), timeout=5
        )
    )
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "T\n" not in topics_of(acl_cluster) and "orders\n" not in topics_of(acl_cluster)
    forged = registry_pb2.RegisterBrokerRequest(
        cluster_name="DefaultCluster",
        broker_name="forged",
        broker_id=0,
        address="127.0.0.1:1",
        topics=[topic],
    )
    at_registry = rpc_error(lambda: registry(acl_cluster).RegisterBroker(forged, timeout=5))
    assert at_registry.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "topics[0].name" in at_registry.details()
    assert send(acl_cluster.stub(ORDERS), "orders").statuses == [broker_pb2.SEND_OK]
