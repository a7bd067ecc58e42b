"""The RocketMQ 5 protocol under BoltMQ's ACL: the official clients' signatures checked.

A broker with ``acl_enable``: the official Python client signs with an account's access
key and secret; wrong or missing credentials are UNAUTHORIZED, missing rights FORBIDDEN,
and nothing refused is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2, service_pb2_grpc
from tests.integration.rocketmq.official_client import (
    client_log,
    needs_official_client,
    of,
    run_client,
)
from tests.integration.test_acl import ADMIN, AclCluster, queue_end

APP = ("rmq-app", "rmq-app-secret-1")
WRITER = ("rmq-writer", "rmq-writer-secret-1")
READER = ("rmq-reader", "rmq-reader-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": APP[0],
            "secretKey": APP[1],
            "topicPerms": {"RmqAcl": "PUB|SUB"},
            "groupPerms": {"rmq-acl-group": "SUB"},
        },
        {"accessKey": WRITER[0], "secretKey": WRITER[1], "topicPerms": {"RmqAcl": "PUB"}},
        {
            "accessKey": READER[0],
            "secretKey": READER[1],
            "topicPerms": {"RmqAcl": "SUB"},
            "groupPerms": {"rmq-acl-group": "SUB"},
        },
    ]
}


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    cluster = AclCluster(Path(tmp_path_factory.mktemp("rmq-acl")), SEED)
    yield cluster
    cluster.stop()


def signed(access_key: str, secret: str, when: float | None = None) -> tuple[tuple[str, str], ...]:
    """The headers the official clients send."""
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if when is None else when))
    signature = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return (
        ("x-mq-client-id", "acl-raw-client"),
        ("x-mq-date-time", date_time),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
            f"Signature={signature}",
        ),
    )


def route_status(cluster: AclCluster, metadata: Any) -> v2.Status:
    stub = service_pb2_grpc.MessagingServiceStub(sync_channel(cluster.broker.address))
    answer = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=v2.Resource(name="RmqAcl")),
        metadata=metadata,
        timeout=10,
    )
    return answer.status


@needs_official_client
def test_an_account_with_rights_produces_and_consumes_with_the_official_clients(
    acl_cluster: AclCluster,
) -> None:
    address = acl_cluster.broker.address
    sent = of(
        run_client("rmq_producer.py", address, "send", "RmqAcl", "2", credentials=APP), "sent"
    )
    assert len(sent) == 2
    events = run_client(
        "rmq_consumer.py", address, "drain", "rmq-acl-group", "RmqAcl", "2", "30", credentials=APP
    )
    assert sorted(r["message_id"] for r in of(events, "received")) == sorted(
        s["message_id"] for s in sent
    )


@needs_official_client
def test_wrong_credentials_are_unauthorized_and_missing_rights_forbidden(
    acl_cluster: AclCluster, tmp_path: Path
) -> None:
    address = acl_cluster.broker.address
    before = queue_end(acl_cluster, "RmqAcl") if _exists(acl_cluster) else 0
    wrong = run_client(
        "rmq_producer.py",
        address,
        "send",
        "RmqAcl",
        "1",
        credentials=(APP[0], "not-the-secret"),
        home=tmp_path,
    )
    (error,) = of(wrong, "error")  # the client reports a failed route, and logs why
    assert "route" in error["message"]
    assert "query topic raise exception, 40100, access key rmq-app is unknown" in client_log(
        tmp_path
    )
    assert "refused QueryRoute: UNAUTHORIZED: access key rmq-app is unknown" in (
        acl_cluster.broker.log()
    )
    reader = run_client("rmq_producer.py", address, "send", "RmqAcl", "1", credentials=READER)
    (error,) = of(reader, "error")
    assert (
        error["type"] == "ForbiddenException" and "rmq-reader may not publish" in error["message"]
    )
    assert queue_end(acl_cluster, "RmqAcl") == before
    writer = run_client(
        "rmq_consumer.py",
        address,
        "drain",
        "rmq-acl-group",
        "RmqAcl",
        "1",
        "3",
        credentials=WRITER,
    )
    assert of(writer, "received") == []
    assert any(
        e["type"] == "ForbiddenException" and "rmq-writer may not subscribe" in e["message"]
        for e in of(writer, "error")
    )


def _exists(cluster: AclCluster) -> bool:
    return route_status(cluster, signed(*APP)).code == v2.OK


def test_raw_calls_are_refused_without_a_fresh_signature_of_a_known_account(
    acl_cluster: AclCluster,
) -> None:
    good = signed(*APP)
    assert route_status(acl_cluster, good).code == v2.OK
    refusals = {
        "none": (("x-mq-client-id", "c"),),
        "stale": signed(*APP, when=time.time() - 3600),
        "future": signed(*APP, when=time.time() + 3600),
        "unknown key": signed("nobody", "whatever"),
        "wrong secret": signed(APP[0], "wrong"),
        "malformed": (*good[:2], ("authorization", "Basic Zm9vOmJhcg==")),
        "bad date": (good[0], ("x-mq-date-time", "yesterday"), good[2]),
    }
    for why, metadata in refusals.items():
        answer = route_status(acl_cluster, metadata)
        assert answer.code == v2.UNAUTHORIZED, (why, answer.message)
        assert APP[1] not in answer.message
    unknown = route_status(acl_cluster, refusals["unknown key"]).message
    wrong = route_status(acl_cluster, refusals["wrong secret"]).message
    assert unknown.replace("nobody", "K") == wrong.replace(APP[0], "K")  # one answer for both
    stub = service_pb2_grpc.MessagingServiceStub(sync_channel(acl_cluster.broker.address))
    settings = service_pb2.TelemetryCommand(settings=v2.Settings(client_type=v2.PRODUCER))
    (refused,) = list(stub.Telemetry(iter([settings]), metadata=refusals["none"], timeout=10))
    assert refused.status.code == v2.UNAUTHORIZED
