"""Access control across real processes: signed calls, rights, admin calls, persistence.

A registry, a store and a broker with ``acl_enable`` and an ACL seed file;
clients sign with the SDK's credentials, raw signed stubs or the CLI's
BOLTMQ_ACCESS_KEY / BOLTMQ_SECRET_KEY.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from bench.cli import bench as bench_command
from boltmq.cli.main import main
from boltmq.client import new_client_id
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import Credentials, RequestSigner, signed_metadata
from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.pull_consumer import PullConsumer
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2, registry_pb2
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import ServiceProcess

ADMIN = Credentials("admin-key", "admin-secret-1")
ORDERS = Credentials("orders-app", "orders-secret-1")
READER = Credentials("reader-app", "reader-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": ORDERS.access_key,
            "secretKey": ORDERS.secret_key,
            "topicPerms": {"orders": "PUB|SUB"},
        },
        {
            "accessKey": READER.access_key,
            "secretKey": READER.secret_key,
            "topicPerms": {"orders": "SUB"},
            "groupPerms": {"orders-group": "SUB", "SPARK_READER": "SUB"},
        },
    ]
}
SECRETS = [ADMIN.secret_key, ORDERS.secret_key, READER.secret_key]


class AclCluster:
    """Registry, store and an ACL-enforcing broker; the broker restarts on its port."""

    def __init__(
        self,
        tmp_path: Path,
        seed: Mapping[str, object] | None = None,
        broker_settings: tuple[str, ...] = (),
    ) -> None:
        self.log_dir = tmp_path / "logs"
        self.seed = tmp_path / "acl.json"
        self.seed.write_text(json.dumps(seed or SEED))
        self.broker_settings = broker_settings
        self.registry = ServiceProcess("registry", self.log_dir, *CLUSTER_REGISTRY_SETTINGS).start()
        self.store = ServiceProcess(
            "store", self.log_dir, f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS
        ).start()
        self.broker = self._start_broker(0)

    def _start_broker(self, port: int) -> ServiceProcess:
        return ServiceProcess(
            "broker",
            self.log_dir,
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            *CLUSTER_BROKER_SETTINGS,
            "acl_enable=true",
            f"acl_file={self.seed}",
            "acl_signature_max_skew_ms=60000",
            *self.broker_settings,
            port=port,
        ).start()

    def restart_broker(self) -> None:
        assert self.broker.stop() == 0, self.broker.last_error()
        self.broker = self._start_broker(self.broker.port)

    def stub(self, credentials: Credentials | None) -> broker_pb2_grpc.BrokerServiceStub:
        channel = sync_channel(self.broker.address)
        if credentials is not None:
            channel = grpc.intercept_channel(channel, RequestSigner(credentials, "test-client"))
        return broker_pb2_grpc.BrokerServiceStub(channel)

    def stop(self) -> None:
        for proc in (self.broker, self.store, self.registry):
            proc.stop()


@pytest.fixture
def acl_cluster(tmp_path: Path) -> Iterator[AclCluster]:
    cluster = AclCluster(tmp_path)
    yield cluster
    cluster.stop()


SEND_METHOD = "/boltmq.v1.BrokerService/SendMessage"


def send_request(topic: str, body: bytes = b"x") -> broker_pb2.SendRequest:
    return broker_pb2.SendRequest(
        producer_group="acl-test",
        messages=[message_pb2.Message(topic=topic, queue_id=0, body=body)],
    )


def send(
    stub: broker_pb2_grpc.BrokerServiceStub, topic: str, body: bytes = b"x", **call: object
) -> broker_pb2.SendResponse:
    response: broker_pb2.SendResponse = stub.SendMessage(
        send_request(topic, body), timeout=5, **call
    )
    return response


def refused(call: object) -> grpc.StatusCode:
    """The status code of a call expected to fail."""
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()  # type: ignore[attr-defined,no-any-return]


def refusal_text(call: object) -> str:
    """The details of a call expected to fail."""
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.details()  # type: ignore[attr-defined,no-any-return]


def queue_end(cluster: AclCluster, topic: str) -> int:
    status = cluster.stub(ADMIN).TopicStatus(broker_pb2.TopicStatusRequest(topic=topic), timeout=5)
    return sum(q.max_offset for q in status.queues)


def test_good_credentials_produce_and_consume(acl_cluster: AclCluster) -> None:
    producer = Producer(acl_cluster.registry.address, credentials=ORDERS).start()
    try:
        result = producer.send(Message(topic="orders", body=b"signed"))
    finally:
        producer.shutdown()
    assert result.status.name == "SEND_OK"
    consumer = PullConsumer(acl_cluster.registry.address, "orders-group", credentials=READER)
    try:
        queue = next(q for q in consumer.queues("orders") if q.queue_id == result.queue.queue_id)
        pulled = consumer.pull(queue, 0, 8)
    finally:
        consumer.shutdown()
    assert [bytes(m.body) for m in pulled.messages] == [b"signed"]


def test_bench_signs_with_the_cli_credentials(acl_cluster: AclCluster) -> None:
    bench = [
        "produce",
        "--registry",
        acl_cluster.registry.address,
        "--topic",
        "orders",
        "--count",
        "20",
        "--batch",
        "10",
        "--concurrency",
        "1",
        "--json",
    ]
    signed = CliRunner().invoke(
        bench_command,
        [*bench, "--access-key", ORDERS.access_key],
        env={"BOLTMQ_SECRET_KEY": ORDERS.secret_key},
    )
    assert signed.exit_code == 0, signed.output
    assert json.loads(signed.output.splitlines()[-1])["messages"] == 20
    unsigned = CliRunner().invoke(bench_command, bench)
    assert unsigned.exit_code == 1
    assert "UNAUTHENTICATED" in unsigned.output and "Traceback" not in unsigned.output
    assert ORDERS.secret_key not in signed.output + unsigned.output


def test_wrong_missing_or_stale_credentials_are_unauthenticated(acl_cluster: AclCluster) -> None:
    wrong = Credentials(ORDERS.access_key, "not-the-secret")
    assert (
        refused(lambda: send(acl_cluster.stub(wrong), "orders")) == grpc.StatusCode.UNAUTHENTICATED
    )
    assert (
        refused(lambda: send(acl_cluster.stub(None), "orders")) == grpc.StatusCode.UNAUTHENTICATED
    )
    stale_ms = int(time.time() * 1000) - 120_000  # beyond the broker's 60 s
    body = send_request("orders").SerializeToString()
    stale = signed_metadata(ORDERS, SEND_METHOD, new_client_id(), body, stale_ms)
    assert (
        refused(lambda: send(acl_cluster.stub(None), "orders", metadata=stale))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    fresh = signed_metadata(ORDERS, SEND_METHOD, new_client_id(), body)
    assert send(acl_cluster.stub(None), "orders", metadata=fresh).statuses == [broker_pb2.SEND_OK]
    log = acl_cluster.broker.log()
    assert "UNAUTHENTICATED" in log and "wrong signature for access key orders-app" in log
    # The caller is not told whether the access key exists; only the log says.
    unknown = Credentials("nobody-here", ORDERS.secret_key)
    answers = {
        refusal_text(lambda c=c: send(acl_cluster.stub(c), "orders")).replace(c.access_key, "K")
        for c in (wrong, unknown)
    }
    assert answers == {
        "access key K is unknown, or the signature does not match its secret and the method called"
    }
    assert "unknown access key nobody-here" in acl_cluster.broker.log()
    assert not any(secret in log for secret in [*SECRETS, "not-the-secret"])


def test_publishing_without_pub_is_denied_and_nothing_is_stored(acl_cluster: AclCluster) -> None:
    send(acl_cluster.stub(ORDERS), "orders", b"first")
    before = queue_end(acl_cluster, "orders")
    assert (
        refused(lambda: send(acl_cluster.stub(READER), "orders", b"sneaky"))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert (
        refused(lambda: send(acl_cluster.stub(ORDERS), "elsewhere"))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert queue_end(acl_cluster, "orders") == before
    topics = {
        t.name
        for t in acl_cluster.stub(ADMIN)
        .ListTopics(broker_pb2.ListTopicsRequest(), timeout=5)
        .topics
    }
    assert "elsewhere" not in topics  # a denied send does not even auto-create its topic
    assert "reader-app has SUB on topic 'orders'" in acl_cluster.broker.log()


def test_admin_calls_need_an_admin_account(acl_cluster: AclCluster) -> None:
    send(acl_cluster.stub(ORDERS), "orders")
    delete = broker_pb2.DeleteTopicRequest(topic="orders")
    assert (
        refused(lambda: acl_cluster.stub(ORDERS).DeleteTopic(delete, timeout=5))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    upsert = broker_pb2.UpsertTopicRequest(
        topic=registry_pb2.TopicConfig(
            name="new-topic", read_queue_nums=1, write_queue_nums=1, perm=6
        )
    )
    assert (
        refused(lambda: acl_cluster.stub(ORDERS).UpsertTopic(upsert, timeout=5))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    acl_cluster.stub(ADMIN).UpsertTopic(upsert, timeout=5)
    runner = CliRunner()
    env = {"BOLTMQ_ACCESS_KEY": ORDERS.access_key, "BOLTMQ_SECRET_KEY": ORDERS.secret_key}
    result = runner.invoke(
        main, ["admin", "acl", "show", "--registry", acl_cluster.registry.address], env=env
    )
    assert result.exit_code == 1
    assert "PERMISSION_DENIED" in result.output and "needs an admin account" in result.output


def test_acl_edits_by_cli_persist_across_a_broker_restart(acl_cluster: AclCluster) -> None:
    runner = CliRunner()
    env = {
        "BOLTMQ_ACCESS_KEY": ADMIN.access_key,
        "BOLTMQ_SECRET_KEY": ADMIN.secret_key,
        "BOLTMQ_ACCOUNT_SECRET": "newcomer-secret",
    }
    registry = ["--registry", acl_cluster.registry.address]
    added = runner.invoke(
        main,
        ["admin", "acl", "set-account", "newcomer", *registry, "--topic", "orders=PUB"],
        env=env,
    )
    assert added.exit_code == 0, added.output
    deleted = runner.invoke(
        main, ["admin", "acl", "delete-account", READER.access_key, *registry], env=env
    )
    assert deleted.exit_code == 0, deleted.output
    bad = runner.invoke(
        main,
        ["admin", "acl", "set-account", "other-app", *registry, "--topic", "orders=WRITE"],
        env=env,
    )
    assert bad.exit_code == 1 and "unknown permission 'WRITE'" in bad.output

    acl_cluster.restart_broker()  # the seed file is still configured: the store's copy wins
    newcomer = Credentials("newcomer", "newcomer-secret")
    assert send(acl_cluster.stub(newcomer), "orders").statuses == [broker_pb2.SEND_OK]
    assert (
        refused(lambda: send(acl_cluster.stub(READER), "orders")) == grpc.StatusCode.UNAUTHENTICATED
    )
    shown = runner.invoke(main, ["admin", "acl", "show", *registry], env=env)
    assert shown.exit_code == 0, shown.output
    assert "newcomer" in shown.output and "newcomer-secret" not in shown.output
    assert "reader-app" not in shown.output


def test_the_last_admin_account_cannot_be_removed(acl_cluster: AclCluster) -> None:
    remove = broker_pb2.UpdateAclRequest(delete_access_key=ADMIN.access_key)
    assert (
        refused(lambda: acl_cluster.stub(ADMIN).UpdateAcl(remove, timeout=5))
        == grpc.StatusCode.FAILED_PRECONDITION
    )
    assert send(acl_cluster.stub(ORDERS), "orders").statuses == [broker_pb2.SEND_OK]
