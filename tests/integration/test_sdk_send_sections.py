"""The SDK's natural batches across topics: one SendRequest of sections, real processes.

Concurrent sends of many topics to one broker that queue behind the calls in
flight (two, the lanes of unsharded sends) leave together as one request (the
broker said in SendStream's initial metadata that it takes sections), each send
getting its own result; a request refused whole for one
topic's sake (an access rule) sends the others again alone, so only that topic's sends
fail and nothing is stored twice. Calls are held by freezing the broker (SIGSTOP),
always thawed before the test ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, SendError
from boltmq.message import SendResult, SendStatus
from boltmq.send_stream import SECTIONS_HEADER
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import pull_everything
from tests.integration.send_stream_client import RawStream, send_request
from tests.integration.test_acl import ORDERS, AclCluster, queue_end
from tests.integration.test_acl_send_stream import (
    acl_cluster,  # noqa: F401 - the module's ACL cluster
)
from tests.integration.test_send_stream_more import Frozen
from tests.waiting import wait_until

TOPICS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(Path(tmp_path_factory.mktemp("sections")))
    yield started
    started.stop()


class Sends:
    """Sends started on threads; each keeps its result or error by body."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.results: dict[bytes, SendResult | BaseException] = {}
        self.threads: list[threading.Thread] = []

    def start(self, topic: str, body: bytes) -> None:
        def send() -> None:
            try:
                self.results[body] = self.producer.send(Message(topic, body))
            except BaseException as exc:
                self.results[body] = exc

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)


def pid(process: object) -> int:
    proc = getattr(process, "proc", None)
    assert proc is not None
    return int(proc.pid)


def test_the_broker_says_it_takes_sections(cluster: Cluster) -> None:
    stream = RawStream(cluster.broker.address)
    try:
        stream.send(1, send_request("SecHeader", b"x"))
        assert stream.read().id == 1
        assert SECTIONS_HEADER in stream.initial_metadata()
    finally:
        stream.close()


def test_sends_of_many_topics_queued_behind_a_call_leave_as_one_request(
    cluster: Cluster,
) -> None:
    with Producer(cluster.registry.address, "sections-pg") as producer:
        for n in range(TOPICS):  # every topic exists; the stream is open
            producer.send(Message(f"Sec{n}", b"warm-up"))
        stream = producer.client.send_stream(cluster.broker.address)
        assert stream.takes_sections
        batcher = producer._batcher
        assert batcher is not None
        calls, key = batcher.calls, (cluster.broker.address,)
        sends = Sends(producer)
        with Frozen(pid(cluster.broker)):
            for body in (b"first", b"second"):  # both lanes in flight, the broker frozen
                sends.start("Sec0", body)
            wait_until(lambda: batcher.calls == calls + 2, "the first two calls leave")
            for n in range(TOPICS):
                sends.start(f"Sec{n}", b"queued-%d" % n)
            wait_until(lambda: batcher.queued(key) == TOPICS, "every other send queues")
        sends.join()
    assert batcher.calls - calls == 3  # the first two calls, then one for all 12 topics
    for n in range(TOPICS):
        result = sends.results[b"queued-%d" % n]
        assert isinstance(result, SendResult), result
        assert result.status is SendStatus.SEND_OK and result.queue.topic == f"Sec{n}"
        stored = [bytes(m.body) for m in pull_everything(cluster, f"Sec{n}")]
        assert stored.count(b"queued-%d" % n) == 1
    first = [bytes(m.body) for m in pull_everything(cluster, "Sec0")]
    assert first.count(b"first") == 1 and first.count(b"second") == 1


def test_a_topic_without_pub_fails_alone_and_the_others_are_stored_once(
    acl_cluster: AclCluster,  # noqa: F811 - the fixture imported above
) -> None:
    with Producer(acl_cluster.registry.address, "sections-acl-pg", credentials=ORDERS) as producer:
        producer.send(Message("orders", b"open"))  # the stream is open; sections known
        assert producer.client.send_stream(acl_cluster.broker.address).takes_sections
        batcher = producer._batcher
        assert batcher is not None
        before, key = queue_end(acl_cluster, "orders"), (acl_cluster.broker.address,)
        calls, sends = batcher.calls, Sends(producer)
        with Frozen(pid(acl_cluster.broker)):
            for body in (b"o-first", b"o-second"):  # both lanes in flight
                sends.start("orders", body)
            wait_until(lambda: batcher.calls == calls + 2, "the first two calls leave")
            sends.start("orders", b"o-1")
            sends.start("payments", b"p-1")  # orders-app has no PUB on payments
            sends.start("orders", b"o-2")
            wait_until(lambda: batcher.queued(key) == 3, "three sends queue")
        sends.join()
    for body in (b"o-first", b"o-second", b"o-1", b"o-2"):
        result = sends.results[body]
        assert isinstance(result, SendResult) and result.status is SendStatus.SEND_OK, result
    refused = sends.results[b"p-1"]
    assert isinstance(refused, SendError), refused
    assert "PERMISSION_DENIED" in str(refused) and "'payments'" in str(refused)
    assert queue_end(acl_cluster, "orders") == before + 4  # each stored once
