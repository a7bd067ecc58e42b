"""POP state is replicated like the other metadata: a replica's broker copies popState.json
and (sealed on the way) popSecret.json, so after a failover the promoted replica accepts
the receipt handles its master issued, and refuses them once used.

A :class:`~boltmq.cli.dev.local_cluster.LocalCluster` group (registry; master and
replica, each a store, its HA service and its broker) with the ACL on, the brokers
signing their copies as the admin account (tests/integration/test_acl_replica.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from boltmq.cli.dev.local_cluster import Member
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import Credentials, RequestSigner
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2, registry_pb2
from tests.integration.test_acl_replica import (
    ADMIN,
    APP,
    GROUP,
    TOPIC,
    broker_of,
    broker_stub,
    start_group,
    store_config,
)
from tests.integration.test_failover import wait_for


def app_stub(address: str, who: Credentials = APP) -> broker_pb2_grpc.BrokerServiceStub:
    channel = grpc.intercept_channel(sync_channel(address), RequestSigner(who, "pop-replica"))
    return broker_pb2_grpc.BrokerServiceStub(channel)


def ack_request(handle: str) -> broker_pb2.AckMessageRequest:
    return broker_pb2.AckMessageRequest(group=GROUP, topic=TOPIC, receipt_handle=handle)


def test_a_promoted_replica_accepts_the_masters_receipt_handles(tmp_path: Path) -> None:
    group = start_group(tmp_path, ADMIN)
    try:
        master, replica = group.members
        broker_stub(master).UpsertTopic(
            broker_pb2.UpsertTopicRequest(
                topic=registry_pb2.TopicConfig(
                    name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6
                )
            ),
            timeout=10,
        )
        app = app_stub(broker_of(master).address)
        app.SendMessage(
            broker_pb2.SendRequest(
                producer_group="pop-replica",
                messages=[message_pb2.Message(topic=TOPIC, queue_id=0, body=b"held")],
            ),
            timeout=10,
        )
        (got,) = app.ReceiveMessages(
            broker_pb2.ReceiveMessagesRequest(
                group=GROUP, topic=TOPIC, max_messages=4, invisible_ms=600_000, wait_ms=5_000
            ),
            timeout=30,
        ).messages

        def in_flight(member: Member) -> list[str]:
            state = store_config(member, "popState.json")
            queues = json.loads(state)["popTable"].get(f"{TOPIC}@{GROUP}", {}) if state else {}
            return list(queues.get("0", {}).get("inFlight", {}))

        def copied() -> bool:
            held = [str(got.message.queue_offset)]
            return in_flight(replica) == held == in_flight(master) and store_config(
                replica, "popSecret.json"
            ) == store_config(master, "popSecret.json")

        # the master's broker saves its state every offset_persist_interval_ms; the replica
        # copies the master broker's (GetMetadata) every metadata_sync_interval_ms
        wait_for(copied, "both stores hold the in-flight message and the same secret")

        broker_of(master).stop()
        master.store.kill()
        master.store.stop()
        broker_stub(replica).Promote(broker_pb2.PromoteRequest(), timeout=30)
        promoted = app_stub(broker_of(replica).address)

        def acked() -> bool:
            try:
                promoted.AckMessage(ack_request(got.receipt_handle), timeout=10)
            except grpc.RpcError as exc:  # the broker sees its store's new role shortly
                assert "replica" in (exc.details() or ""), exc.details()
                return False
            return True

        wait_for(acked, "the promoted replica's broker acks the master's handle")
        try:
            promoted.AckMessage(ack_request(got.receipt_handle), timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "acked or dead-lettered already" in (exc.details() or "")
        else:
            raise AssertionError("a used handle was accepted twice")
    finally:
        group.stop()
