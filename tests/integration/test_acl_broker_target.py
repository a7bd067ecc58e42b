"""Replaying a captured signed call on another broker group, with the ACL on.

Two broker groups (``broker-a`` and ``broker-b``, each a broker on its own
store) register with one registry and enforce the same ACL. An attacker who
saw a SendMessage signed for ``broker-a`` (its metadata and its bytes) sends
it, within the signature window, to ``broker-b``: refused, as the signature
names the group it was made for and ``broker-b``'s replay cache never saw it;
to ``broker-a`` once more: refused as a replay. Stripping or changing the
signed target breaks the signature. The SDK's producer and consumer and the
CLI still work against both groups, each call signed for the group it goes to.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from click.testing import CliRunner

from boltmq.cli.main import main
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.registry_client import RegistryClient
from boltmq.kernel.signing import TARGET_HEADER, Credentials, RequestSigner
from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.pull_consumer import PullConsumer
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import ServiceProcess
from tests.integration.test_acl import ADMIN, ORDERS, READER, SEED, SEND_METHOD, send_request

GROUPS = ("broker-a", "broker-b")
Metadata = tuple[tuple[str, str], ...]


class TwoGroups:
    """A registry and two ACL-enforcing broker groups, each a broker on its own store."""

    def __init__(self, tmp_path: Path) -> None:
        log_dir = tmp_path / "logs"
        seed = tmp_path / "acl.json"
        seed.write_text(json.dumps(SEED))
        self.procs: list[ServiceProcess] = []
        self.registry = self._start("registry", log_dir, *CLUSTER_REGISTRY_SETTINGS)
        self.brokers: dict[str, ServiceProcess] = {}
        for name in GROUPS:
            store = self._start(
                "store", log_dir, f"root_dir={tmp_path / name}", *CLUSTER_STORE_SETTINGS
            )
            self.brokers[name] = self._start(
                "broker",
                log_dir,
                f"broker_name={name}",
                f"store_address={store.address}",
                f"registry_addresses={self.registry.address}",
                *CLUSTER_BROKER_SETTINGS,
                "acl_enable=true",
                f"acl_file={seed}",
                "acl_signature_max_skew_ms=60000",
            )
        self._wait_registered()

    def _start(self, service: str, log_dir: Path, *settings: str) -> ServiceProcess:
        proc = ServiceProcess(service, log_dir, *settings).start()
        self.procs.append(proc)
        return proc

    def _wait_registered(self) -> None:
        registry = RegistryClient([self.registry.address])
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                names = {b.broker_name for b in registry.cluster_info().brokers}
                if names == set(GROUPS):
                    return
                time.sleep(0.1)
            raise AssertionError(f"brokers registered: {names}")
        finally:
            registry.close()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture
def two_groups(tmp_path: Path) -> Iterator[TwoGroups]:
    cluster = TwoGroups(tmp_path)
    yield cluster
    cluster.stop()


def sdk_signed(body: bytes, target: str, credentials: Credentials = ORDERS) -> Metadata:
    """The metadata the SDK's signer adds to a SendMessage of ``body`` for broker group
    ``target``: what an attacker sees on the wire."""
    signer = RequestSigner(credentials, "victim@1@abc", target)
    details = SimpleNamespace(method=SEND_METHOD, timeout=5, metadata=None, credentials=None)
    metadata: Metadata = signer.intercept_unary_unary(
        lambda signed, _request: tuple(signed.metadata), details, body
    )
    return metadata


def raw_send(address: str, body: bytes, metadata: Metadata) -> broker_pb2.SendResponse:
    """SendMessage with exactly ``body`` and ``metadata`` on the wire."""
    call = sync_channel(address).unary_unary(
        SEND_METHOD, response_deserializer=broker_pb2.SendResponse.FromString
    )
    response: broker_pb2.SendResponse = call(body, metadata=metadata, timeout=5)
    return response


def refusal(address: str, body: bytes, metadata: Metadata) -> str:
    with pytest.raises(grpc.RpcError) as info:
        raw_send(address, body, metadata)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    return info.value.details()  # type: ignore[attr-defined,no-any-return]


def stored_messages(cluster: TwoGroups, name: str, topic: str) -> int:
    """Messages stored in ``topic`` by group ``name`` (0: the topic does not exist there)."""
    stub = broker_pb2_grpc.BrokerServiceStub(
        grpc.intercept_channel(
            sync_channel(cluster.brokers[name].address), RequestSigner(ADMIN, "test", name)
        )
    )
    try:
        status = stub.TopicStatus(broker_pb2.TopicStatusRequest(topic=topic), timeout=5)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND  # not even created
        return 0
    return sum(q.max_offset for q in status.queues)


def test_a_call_captured_for_one_group_is_refused_by_the_other_and_as_a_replay(
    two_groups: TwoGroups,
) -> None:
    broker_a, broker_b = (two_groups.brokers[name].address for name in GROUPS)
    body = send_request("orders", b"pay 10").SerializeToString()
    captured = sdk_signed(body, "broker-a")
    assert dict(captured)[TARGET_HEADER] == "broker-a"

    details = refusal(broker_b, body, captured)
    assert "signed for broker 'broker-a', not for this broker ('broker-b')" in details
    assert raw_send(broker_a, body, captured).statuses == [broker_pb2.SEND_OK]
    assert "replayed call: nonce" in refusal(broker_a, body, captured)
    assert "signed for broker 'broker-a'" in refusal(broker_b, body, captured)  # still
    for target in ("broker-b", ""):  # the target re-written for broker-b, or for any broker
        changed = tuple((k, target if k == TARGET_HEADER else v) for k, v in captured)
        assert "the signature does not match" in refusal(broker_b, body, changed)
    stripped = tuple((k, v) for k, v in captured if k != TARGET_HEADER)
    assert "upgrade the client" in refusal(broker_b, body, stripped)
    assert stored_messages(two_groups, "broker-a", "orders") == 1
    assert stored_messages(two_groups, "broker-b", "orders") == 0
    assert "signed for broker 'broker-a'" in two_groups.brokers["broker-b"].log()


def test_a_call_signed_for_any_broker_is_accepted_by_each_group_once(
    two_groups: TwoGroups,
) -> None:
    body = send_request("orders", b"any").SerializeToString()
    unnamed = sdk_signed(body, "")
    for name in GROUPS:
        address = two_groups.brokers[name].address
        assert raw_send(address, body, unnamed).statuses == [broker_pb2.SEND_OK]
        assert "replayed call" in refusal(address, body, unnamed)


def test_the_sdk_and_the_cli_sign_for_the_group_they_call(two_groups: TwoGroups) -> None:
    registry = two_groups.registry.address
    admin_env = {"BOLTMQ_ACCESS_KEY": ADMIN.access_key, "BOLTMQ_SECRET_KEY": ADMIN.secret_key}
    created = CliRunner().invoke(
        main,
        ["admin", "topic", "create", "orders", "--registry", registry, "--queues", "2"],
        env=admin_env,
    )
    assert created.exit_code == 0, created.output
    assert "broker-a: orders" in created.output and "broker-b: orders" in created.output
    wrong = CliRunner().invoke(  # the address of broker-b, the name of broker-a
        main,
        ["admin", "topic", "list", "--registry", registry, "--broker", "broker-a"]
        + ["--broker-address", two_groups.brokers["broker-b"].address],
        env=admin_env,
    )
    assert wrong.exit_code != 0 and "signed for broker 'broker-a'" in wrong.output

    producer = Producer(registry, credentials=ORDERS).start()
    try:
        results = [producer.send(Message(topic="orders", body=b"%d" % i)) for i in range(8)]
        for name in GROUPS:
            address = two_groups.brokers[name].address
            assert producer.client.broker_name_at(address) == name
    finally:
        producer.shutdown()
    assert {r.queue.broker_name for r in results} == set(GROUPS)
    assert {r.status.name for r in results} == {"SEND_OK"}

    consumer = PullConsumer(registry, "orders-group", credentials=READER)
    try:
        pulled: dict[str, int] = dict.fromkeys(GROUPS, 0)
        for queue in consumer.queues("orders"):
            result = consumer.pull(queue, 0, 32)
            pulled[queue.broker_name] += len(result.messages)
            consumer.commit(queue, result.next_begin_offset)
            assert consumer.committed(queue) == result.next_begin_offset
    finally:
        consumer.shutdown()
    assert sum(pulled.values()) == 8 and all(pulled.values())
