"""Requests of sections against a broker with the ACL on: PUB on every section's topic.

An account holding PUB on ``orders`` only sends sections for ``orders`` and
``payments`` (a topic that exists): the whole request is refused
PERMISSION_DENIED before any section runs, so the ``orders`` records are not
stored either, over a unary SendMessage and over a signed SendStream (each
message signed as the SDK signs it). A section naming a system topic is refused
the same way; sections of the account's own topic are stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.v1 import broker_pb2
from boltmq.wire.record_batch import encode_send_record
from services.broker.metadata.topic_config import SCHEDULE_TOPIC
from tests.integration.send_stream_client import signed
from tests.integration.test_acl import ADMIN, ORDERS, AclCluster, queue_end, refusal_text, refused
from tests.integration.test_acl_send_stream import opened

OK = grpc.StatusCode.OK.value[0]
DENIED = grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    cluster = AclCluster(Path(tmp_path_factory.mktemp("acl-sections")))
    admin = cluster.stub(ADMIN)
    for topic in ("orders", "payments"):  # both exist: only the rights decide
        created = admin.SendMessage(sections_request(topic), timeout=5)
        assert [a.code for a in created.sections] == [OK], created
    yield cluster
    cluster.stop()


def sections_request(*topics: str) -> broker_pb2.SendRequest:
    """One section of one record per topic."""
    return broker_pb2.SendRequest(
        producer_group="acl-sections",
        sections=[
            broker_pb2.SendSection(
                topic=topic,
                queue_id=0,
                records=encode_send_record(topic, f"to {topic}".encode()),
                record_count=1,
            )
            for topic in topics
        ],
    )


def ends(cluster: AclCluster) -> dict[str, int]:
    return {topic: queue_end(cluster, topic) for topic in ("orders", "payments")}


def test_sections_of_a_topic_without_pub_are_refused_whole_over_a_unary_call(
    acl_cluster: AclCluster,
) -> None:
    before = ends(acl_cluster)
    orders = acl_cluster.stub(ORDERS)
    for topics in [("orders", "payments"), ("payments", "orders"), ("orders", SCHEDULE_TOPIC)]:
        request = sections_request(*topics)
        assert refused(lambda r=request: orders.SendMessage(r, timeout=5)) == DENIED, topics
    text = refusal_text(
        lambda: orders.SendMessage(sections_request("orders", "payments"), timeout=5)
    )
    assert "orders-app has DENY on topic 'payments'; SendMessage needs PUB" in text
    assert ends(acl_cluster) == before  # not even the orders section
    response = orders.SendMessage(sections_request("orders", "orders"), timeout=5)
    assert [a.code for a in response.sections] == [OK, OK]
    assert ends(acl_cluster) == {**before, "orders": before["orders"] + 2}


def test_sections_of_a_topic_without_pub_are_refused_whole_on_a_signed_stream(
    acl_cluster: AclCluster,
) -> None:
    before = ends(acl_cluster)
    stream, metadata = opened(acl_cluster, ORDERS)
    try:
        attack = sections_request("orders", "payments").SerializeToString()
        stream.write(signed(ORDERS, metadata, 1, attack))
        answer = stream.read()
        assert answer.id == 1 and answer.code == DENIED.value[0]
        assert "orders-app has DENY on topic 'payments'; SendMessage needs PUB" in answer.error
        assert not answer.response.sections
        assert ends(acl_cluster) == before
        good = sections_request("orders", "orders").SerializeToString()
        stream.write(signed(ORDERS, metadata, 2, good))  # the stream goes on
        answer = stream.read()
        assert answer.id == 2 and answer.code == OK, answer.error
        assert [a.code for a in answer.response.sections] == [OK, OK]
    finally:
        stream.close()
    assert ends(acl_cluster) == {**before, "orders": before["orders"] + 2}
