"""SearchOffset and ResetOffset under access control.

SearchOffset reads a topic's queue (where its messages of a time begin): it
needs SUB on the topic, like a pull, so an account without it learns nothing
about the topic's traffic. ResetOffset moves another group's progress, which
could make a group skip or replay messages: only an admin account may.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.signing import Credentials
from boltmq.v1 import broker_pb2
from tests.integration.test_acl import ADMIN, ORDERS, READER, SEED, AclCluster, refused, send

OUTSIDER = Credentials("outsider-app", "outsider-secret-1")
OFFSET_SEED = {
    "accounts": [
        *SEED["accounts"],  # type: ignore[misc]
        {
            "accessKey": OUTSIDER.access_key,
            "secretKey": OUTSIDER.secret_key,
            "topicPerms": {"elsewhere": "PUB|SUB"},
            "groupPerms": {"orders-group": "SUB"},
        },
    ]
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path, OFFSET_SEED)
    yield started
    started.stop()


def test_searching_an_offset_needs_sub_on_the_topic(cluster: AclCluster) -> None:
    send(cluster.stub(ORDERS), "orders")
    search = broker_pb2.SearchOffsetRequest(topic="orders", queue_id=0, timestamp_ms=0)
    assert cluster.stub(READER).SearchOffset(search, timeout=5).queue_offset == 0
    assert (
        refused(lambda: cluster.stub(OUTSIDER).SearchOffset(search, timeout=5))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert (
        refused(lambda: cluster.stub(None).SearchOffset(search, timeout=5))
        == grpc.StatusCode.UNAUTHENTICATED
    )


def test_resetting_a_group_needs_an_admin_account(cluster: AclCluster) -> None:
    send(cluster.stub(ORDERS), "orders")
    reset = broker_pb2.ResetOffsetRequest(group="orders-group", topic="orders", latest=True)
    for who in (READER, ORDERS, OUTSIDER):  # consuming as the group is not enough
        assert (
            refused(lambda who=who: cluster.stub(who).ResetOffset(reset, timeout=5))
            == grpc.StatusCode.PERMISSION_DENIED
        )
    done = cluster.stub(ADMIN).ResetOffset(reset, timeout=5)
    assert [q.new_offset for q in done.queues if q.queue_id == 0] == [1]
