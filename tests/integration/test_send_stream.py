"""SendStream across real processes: correlation, deadlines, the in-flight bound, bad
inputs, a broker restart under the SDK, and AsyncProducer.

One registry, store and broker for the module; the broker runs at most
``IN_FLIGHT_MAX`` sends per stream. Sends are held in the broker by freezing the
store process (SIGSTOP) for a moment, always thawed again (SIGCONT) before the
test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import AsyncProducer, Message, Producer, ProducerOptions, PullConsumer, PullStatus
from boltmq.message import MessageQueue
from boltmq.producer import SendError
from boltmq.send_stream import SendStream
from boltmq.v1 import broker_pb2
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import pull_everything
from tests.integration.send_stream_client import RawStream, send_request

IN_FLIGHT_MAX = 2
"""The broker's send_stream_in_flight_max in this module."""
OK = grpc.StatusCode.OK.value[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(
        Path(tmp_path_factory.mktemp("stream")),
        broker_settings=(f"send_stream_in_flight_max={IN_FLIGHT_MAX}",),
    )
    yield started
    started.stop()


@pytest.fixture
def stream(cluster: Cluster) -> Iterator[RawStream]:
    opened = RawStream(cluster.broker.address)
    yield opened
    opened.close()


class Frozen:
    """The store (or the broker) stopped (SIGSTOP) inside the block, running again after."""

    def __init__(self, cluster: Cluster, service: str = "store") -> None:
        proc = cluster.store.proc if service == "store" else cluster.broker.proc
        assert proc is not None
        self.pid = proc.pid

    def __enter__(self) -> Frozen:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def code_of(answer: broker_pb2.SendStreamResponse) -> grpc.StatusCode:
    return next(c for c in grpc.StatusCode if c.value[0] == answer.code)


def test_each_answer_carries_the_id_of_its_send_and_that_sends_offsets(
    cluster: Cluster, stream: RawStream
) -> None:
    sent = {n: f"correlated-{n}".encode() for n in range(1, 41)}
    answers: dict[int, broker_pb2.SendStreamResponse] = {}
    for first in range(1, 41, IN_FLIGHT_MAX):  # as many at once as the broker runs
        for n in range(first, first + IN_FLIGHT_MAX):
            stream.send(n, send_request("Correlated", sent[n], queue_id=n % 4))
        answers.update(stream.read_many(IN_FLIGHT_MAX))
    assert sorted(answers) == sorted(sent)
    with PullConsumer(cluster.registry.address, "stream-probe") as puller:
        for n, answer in answers.items():
            assert answer.code == OK, answer.error
            response = answer.response
            assert response.statuses == [broker_pb2.SEND_OK] and response.queue_id == n % 4
            queue = MessageQueue("Correlated", response.broker_name, response.queue_id)
            pulled = puller.pull(queue, response.queue_offsets[0], 1)
            assert pulled.status is PullStatus.FOUND
            assert bytes(pulled.messages[0].body) == sent[n]


def test_a_send_past_its_deadline_fails_alone_and_the_stream_goes_on(
    cluster: Cluster, stream: RawStream
) -> None:
    stream.send(1, send_request("Deadlines", b"warm"))
    assert stream.read().code == OK
    with Frozen(cluster):
        started = time.monotonic()
        stream.send(2, send_request("Deadlines", b"late"), timeout_ms=300)
        answer = stream.read()
        waited = time.monotonic() - started
    assert answer.id == 2 and code_of(answer) is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "deadline of 300 ms passed" in answer.error
    assert waited >= 0.3
    stream.send(3, send_request("Deadlines", b"on time"))
    answer = stream.read()
    assert answer.id == 3 and answer.code == OK, answer.error


def test_sends_beyond_the_streams_in_flight_bound_are_refused_at_once(
    cluster: Cluster, stream: RawStream
) -> None:
    stream.send(1, send_request("Bounded", b"warm"))
    assert stream.read().code == OK
    with Frozen(cluster):
        for n in range(2, 7):  # 2 and 3 run (held by the frozen store), 4-6 are refused
            stream.send(n, send_request("Bounded", b"b%d" % n), timeout_ms=20_000)
        refused = stream.read_many(3)
    assert sorted(refused) == [4, 5, 6]
    for answer in refused.values():
        assert code_of(answer) is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"more than {IN_FLIGHT_MAX} sends in flight" in answer.error
    held = stream.read_many(2)  # answered once the store runs again
    assert sorted(held) == [2, 3] and all(a.code == OK for a in held.values())


@contextlib.contextmanager
def _stream_of_one_place(cluster: Cluster, group: str, topic: str) -> Iterator[SendStream]:
    """The send stream of an SDK Producer that keeps one send in flight, opened."""
    options = ProducerOptions(stream_in_flight_max=1)
    with Producer(cluster.registry.address, group, options=options) as producer:
        producer.send(Message(topic, b"warm"))
        yield producer.client.send_stream(cluster.broker.address)


def test_the_sdk_waits_for_a_place_on_its_stream_up_to_the_sends_deadline(
    cluster: Cluster,
) -> None:
    with _stream_of_one_place(cluster, "bound-pg", "SdkBound") as stream:
        request = send_request("SdkBound", b"held")
        answers: list[broker_pb2.SendResponse] = []
        with Frozen(cluster):
            held = threading.Thread(target=lambda: answers.append(stream.send(request, 20.0)))
            held.start()
            _wait_for(lambda: stream.in_flight == 1)  # the only place is taken
            with pytest.raises(grpc.RpcError) as info:
                stream.send(send_request("SdkBound", b"no place"), 0.3)
        held.join()
        assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert "no free place on the send stream (1 sends in flight)" in info.value.details()
        assert len(answers) == 1 and answers[0].statuses == [broker_pb2.SEND_OK]
        assert stream.opened == 1


def test_a_send_waiting_for_a_place_on_its_stream_takes_the_one_freed(
    cluster: Cluster,
) -> None:
    with _stream_of_one_place(cluster, "freed-pg", "SdkFreed") as stream:
        answers: dict[bytes, broker_pb2.SendResponse] = {}

        def send(body: bytes) -> None:
            answers[body] = stream.send(send_request("SdkFreed", body), 20.0)

        senders = [threading.Thread(target=send, args=(body,)) for body in (b"one", b"two")]
        with Frozen(cluster):
            senders[0].start()
            _wait_for(lambda: stream.in_flight == 1)
            senders[1].start()  # waits for the place the first holds
            time.sleep(0.3)
            assert stream.in_flight == 1 and not answers
        for sender in senders:
            sender.join()
        assert sorted(answers) == [b"one", b"two"]
        assert all(a.statuses == [broker_pb2.SEND_OK] for a in answers.values())
        assert stream.in_flight == 0 and stream.opened == 1


def test_a_stream_that_stops_answering_is_given_up_and_the_next_send_reconnects(
    cluster: Cluster,
) -> None:
    options = ProducerOptions(send_timeout_ms=500, retry_times=0)
    with Producer(cluster.registry.address, "stalled-pg", options=options) as producer:
        producer.send(Message("Stalled", b"warm"))
        stream = producer.client.send_stream(cluster.broker.address)
        with Frozen(cluster, "broker"):
            started = time.monotonic()
            with pytest.raises(SendError) as info:
                producer.send(Message("Stalled", b"to a stopped broker"))
            waited = time.monotonic() - started
        # the watchdog cancels the stream once nothing came for 1 s past the deadline
        assert "UNAVAILABLE: send stream: it stopped answering" in str(info.value)
        assert waited < 10.0
        _wait_for(lambda: _sends(producer, Message("Stalled", b"after")))
        assert stream.opened == 2


def _sends(producer: Producer, message: Message) -> bool:
    try:
        return producer.send(message).status.name == "SEND_OK"
    except SendError:
        return False  # the broker is still catching up after being stopped


def test_bad_messages_fail_alone(stream: RawStream) -> None:
    stream.send(1, send_request("BadInputs", b"x"), timeout_ms=0)
    stream.send(2, b"\xff\xff\xff")
    stream.send(3, send_request("bad topic!", b"x"))
    stream.write(broker_pb2.SendStreamRequest(id=4, timeout_ms=1_000))  # no send at all
    stream.send(5, send_request("BadInputs", b"good"))
    answers = stream.read_many(5)
    assert code_of(answers[1]) is grpc.StatusCode.INVALID_ARGUMENT
    assert "timeout_ms must be > 0, got 0" in answers[1].error
    assert code_of(answers[2]) is grpc.StatusCode.INVALID_ARGUMENT
    assert "message 2: send does not parse" in answers[2].error
    assert code_of(answers[3]) is grpc.StatusCode.INVALID_ARGUMENT
    assert "bad topic!" in answers[3].error
    assert answers[4].code != OK and answers[4].error
    assert answers[5].code == OK and answers[5].response.statuses == [broker_pb2.SEND_OK]


@pytest.mark.parametrize("ids", [(0,), (5, 5), (7, 3)])
def test_an_id_that_does_not_grow_ends_the_stream(cluster: Cluster, ids: tuple[int, ...]) -> None:
    stream = RawStream(cluster.broker.address)
    try:
        for n in ids:
            stream.send(n, send_request("Ids", b"x"))
        error = stream.ended_after_answers()
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert f"id: {ids[-1]} is not greater than the id before it" in error.details()
    finally:
        stream.close()


@pytest.mark.parametrize("kill", [True, False], ids=["SIGKILL", "SIGTERM"])
def test_a_broker_restart_mid_stream_loses_no_acknowledged_send(
    cluster: Cluster, kill: bool
) -> None:
    options = ProducerOptions(stream_in_flight_max=IN_FLIGHT_MAX, retry_times=4)
    topic = f"Restarted{'Killed' if kill else 'Stopped'}"
    acknowledged: list[str] = []
    failed: list[BaseException] = []
    stop = threading.Event()
    with Producer(cluster.registry.address, "restart-pg", options=options) as producer:

        def sender(n: int) -> None:
            i = 0
            while not stop.is_set():
                try:
                    result = producer.send(Message(topic, b"s%d-%d" % (n, i)))
                    acknowledged.append(result.unique_id)
                except SendError as exc:
                    failed.append(exc)
                i += 1

        threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        try:
            _wait_for(lambda: len(acknowledged) >= 50)
            cluster.restart_broker(kill=kill)
            before = len(acknowledged)
            _wait_for(lambda: len(acknowledged) >= before + 50)  # reconnected
        finally:
            stop.set()
            for t in threads:
                t.join()
        address = cluster.broker.address
        assert producer.client.send_stream(address).opened >= 2  # a new stream after the kill
    stored = {m.properties["UNIQ_KEY"] for m in pull_everything(cluster, topic)}
    assert set(acknowledged) <= stored
    assert len(set(acknowledged)) == len(acknowledged)


def _wait_for(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_async_producer_sends_from_many_tasks_at_once(cluster: Cluster) -> None:
    async def main() -> tuple[list[str], int]:
        async with AsyncProducer(cluster.registry.address, "async-pg", concurrency=16) as p:
            await p.send(Message("AsyncMany", b"warm"))
            calls = p.producer._batcher.calls if p.producer._batcher else 0
            results = await asyncio.gather(
                *(p.send(Message("AsyncMany", b"task-%03d" % n)) for n in range(200))
            )
            batched = (p.producer._batcher.calls if p.producer._batcher else 0) - calls
            assert all(r.status.name == "SEND_OK" for r in results)
            return [r.unique_id for r in results], batched

    unique_ids, calls = asyncio.run(main())
    assert len(set(unique_ids)) == 200
    assert calls < 200  # concurrent tasks' sends left together (natural batching)
    stored = {
        bytes(m.body): m.properties["UNIQ_KEY"] for m in pull_everything(cluster, "AsyncMany")
    }
    assert {b"task-%03d" % n for n in range(200)} <= set(stored)
    assert set(unique_ids) <= set(stored.values())


def test_bad_options_are_refused(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match="send_path must be one of stream, unary"):
        ProducerOptions(send_path="carrier pigeon")
    with pytest.raises(ValueError, match="stream_in_flight_max"):
        ProducerOptions(stream_in_flight_max=0)
    with pytest.raises(ValueError, match="concurrency must be an int >= 1"):
        AsyncProducer(cluster.registry.address, concurrency=0)


def test_the_unary_path_is_still_served(cluster: Cluster) -> None:
    options = ProducerOptions(send_path="unary")
    with Producer(cluster.registry.address, "unary-pg", options=options) as producer:
        result = producer.send(Message("UnaryStill", b"unary"))
        assert result.status.name == "SEND_OK"
        assert not producer.client._send_streams  # no stream was opened
