"""Several sends in one SendStream message (``more``) across real processes.

The broker says in its initial metadata that it takes them; the sends of one
message are each answered as if they came alone (a nested ``more`` refused, ids
still growing); answers ready together come back in one message only to a
client that opened the stream with the same header; and the SDK packs the sends
of many threads to many topics that queued behind its writer into few messages.
Sends are held by freezing a process (SIGSTOP), always thawed before the test ends.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import Message, Producer
from boltmq.send_stream import MORE_HEADER
from boltmq.v1 import broker_pb2
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import pull_everything
from tests.integration.send_stream_client import RawStream, send_request
from tests.waiting import wait_until

INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(Path(tmp_path_factory.mktemp("stream-more")))
    yield started
    started.stop()


class Frozen:
    """A process stopped (SIGSTOP) inside the block, running again after."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def request(message_id: int, body: bytes, **fields: object) -> broker_pb2.SendStreamRequest:
    return broker_pb2.SendStreamRequest(
        id=message_id, send=send_request("MoreT", body), timeout_ms=10_000, **fields
    )


def store_pid(cluster: Cluster) -> int:
    assert cluster.store.proc is not None
    return cluster.store.proc.pid


def test_each_send_of_one_message_is_answered_and_answers_come_together(
    cluster: Cluster,
) -> None:
    stream = RawStream(cluster.broker.address, (MORE_HEADER,))
    try:
        stream.send(1, send_request("MoreT", b"first"))
        assert stream.read().id == 1
        assert MORE_HEADER in stream.initial_metadata()
        nested = request(4, b"nested", more=[request(5, b"never")])
        with Frozen(store_pid(cluster)):  # the sends end together once the store runs
            stream.write(
                request(
                    2,
                    b"a",
                    more=[
                        request(3, b"b"),
                        nested,
                        broker_pb2.SendStreamRequest(id=6, send=b"x", timeout_ms=0),
                        request(7, b"c"),
                    ],
                )
            )
            refused = stream.read_each(2)[1]  # refused at once, before the store
        messages, answers = stream.read_each(3)
    finally:
        stream.close()
    assert sorted(refused) == [4, 6]
    assert refused[4].code == INVALID and refused[4].error.startswith("more: ")
    assert refused[6].code == INVALID and "timeout_ms" in refused[6].error
    assert sorted(answers) == [2, 3, 7] and messages < 3  # answered in one or two messages
    offsets = [answers[i].response.queue_offsets[0] for i in (2, 3, 7)]
    assert all(a.code == 0 for a in answers.values()) and len(set(offsets)) == 3
    bodies = {bytes(m.body) for m in pull_everything(cluster, "MoreT")}
    assert {b"first", b"a", b"b", b"c"} <= bodies and not {b"nested", b"never"} & bodies


def test_an_id_in_more_that_does_not_grow_ends_the_stream(cluster: Cluster) -> None:
    stream = RawStream(cluster.broker.address, (MORE_HEADER,))
    try:
        stream.write(request(5, b"a", more=[request(5, b"again")]))
        ended = stream.ended_after_answers()
    finally:
        stream.close()
    assert ended.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "is not greater than" in (ended.details() or "")


def test_a_client_without_the_header_gets_one_answer_a_message(cluster: Cluster) -> None:
    stream = RawStream(cluster.broker.address)
    try:
        sends = [request(n, b"%d" % n) for n in range(2, 32)]
        last = broker_pb2.SendStreamRequest(id=32, send=b"x", timeout_ms=0)
        with Frozen(store_pid(cluster)):
            stream.write(request(1, b"1", more=[*sends, last]))
            assert stream.read().id == 32  # refused at once: the broker has read them all
        messages, answers = stream.read_each(31)  # ready together once the store runs
    finally:
        stream.close()
    assert sorted(answers) == list(range(1, 32)) and messages == 31
    assert all(a.code == 0 for a in answers.values())


def test_the_sdk_packs_queued_sends_of_many_topics_into_few_messages(cluster: Cluster) -> None:
    # Sharded sends: each topic's queue is a batch key of its own, so each send is a
    # request of its own (unsharded sends of many topics would share one request:
    # tests/integration/test_sdk_send_sections.py).
    body = b"m" * 16384  # 64 of them are more than a fresh stream's flow-control window
    with Producer(cluster.registry.address) as producer:
        producer.send(Message("More0", body))  # the stream is open; the broker said "more"
        stream = producer.client.send_stream(cluster.broker.address)
        before = list(stream.written)
        results: list[object] = []
        assert cluster.broker.proc is not None
        with Frozen(cluster.broker.proc.pid):  # the writer blocks; the others queue
            threads = [
                threading.Thread(
                    target=lambda n=n: results.append(
                        producer.send(Message(f"More{n}", body), sharding_key="k")
                    )
                )
                for n in range(64)
            ]
            for thread in threads:
                thread.start()
            wait_until(lambda: stream.written[1] - before[1] > 0, "the first sends go out")
        for thread in threads:
            thread.join(30)
    messages, sends = stream.written[0] - before[0], stream.written[1] - before[1]
    assert len(results) == 64 and sends == 64 and messages < sends
    for n in range(64):
        assert [bytes(m.body) for m in pull_everything(cluster, f"More{n}")].count(body) >= 1
