"""boltmq.group_offsets: how many calls a commit of many queues makes, and the way back to
one call a queue for a broker without UpdateConsumerOffsets.

The broker's side (every entry checked, nothing committed on a bad one) is tested
against a real broker in tests/integration/test_group_offsets.py; here a stand-in
client counts the calls and plays an older broker.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import grpc

from boltmq.client import ClientInstance
from boltmq.group_offsets import OFFSETS_PER_CALL, commit_offsets
from boltmq.message import MessageQueue
from boltmq.v1 import broker_pb2


class Refused(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return f"{self._code.name} (stand-in)"


class Method:
    """A stub method recording its requests; ``answer`` raises or returns."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        self.requests: list[Any] = []
        self._answer = answer

    def __call__(self, request: Any, timeout: float) -> Any:
        self.requests.append(request)
        return self._answer(request)

    def future(self, request: Any, timeout: float) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(self(request, timeout))
        except grpc.RpcError as exc:
            done.set_exception(exc)
        return done


class Broker:
    def __init__(self, batched: bool, failing: frozenset[tuple[str, int]] = frozenset()) -> None:
        def batch(request: Any) -> Any:
            if not batched:
                raise Refused(grpc.StatusCode.UNIMPLEMENTED)
            return broker_pb2.UpdateConsumerOffsetsResponse()

        def one(request: Any) -> Any:
            if (request.topic, request.queue_id) in failing:
                raise Refused(grpc.StatusCode.UNAVAILABLE)
            return broker_pb2.UpdateConsumerOffsetResponse()

        self.UpdateConsumerOffsets = Method(batch)
        self.UpdateConsumerOffset = Method(one)


class Client:
    """What commit_offsets uses of a ClientInstance: queues of broker ``b<n>`` live at ``b<n>``."""

    rpc_timeout_s = 5.0

    def __init__(self, brokers: dict[str, Broker]) -> None:
        self.brokers = brokers

    def address_of(self, queue: MessageQueue) -> str:
        return queue.broker_name

    def broker(self, address: str) -> Broker:
        return self.brokers[address]


def queues(broker: str, count: int) -> list[MessageQueue]:
    return [MessageQueue(f"t{n // 4}", broker, n % 4) for n in range(count)]


def as_client(client: Client) -> ClientInstance:
    return client  # type: ignore[return-value]


def test_one_call_per_broker_and_per_4096_queues() -> None:
    brokers = {"a": Broker(batched=True), "b": Broker(batched=True)}
    offsets = {q: n for n, q in enumerate(queues("a", OFFSETS_PER_CALL + 5) + queues("b", 7))}
    committed = commit_offsets(as_client(Client(brokers)), "g", offsets)
    assert sorted(committed) == sorted(offsets)
    sent_a = brokers["a"].UpdateConsumerOffsets.requests
    assert [len(r.offsets) for r in sent_a] == [OFFSETS_PER_CALL, 5]
    assert [len(r.offsets) for r in brokers["b"].UpdateConsumerOffsets.requests] == [7]
    entries = {(e.topic, e.queue_id, e.offset) for r in sent_a for e in r.offsets if r.group == "g"}
    assert entries == {(q.topic, q.queue_id, o) for q, o in offsets.items() if q.broker_name == "a"}
    assert brokers["a"].UpdateConsumerOffset.requests == []


def test_an_older_broker_gets_one_call_a_queue_and_a_failed_one_is_left_out() -> None:
    old = Broker(batched=False, failing=frozenset({("t0", 1)}))
    brokers = {"old": old, "new": Broker(batched=True)}
    offsets = {q: 3 for q in queues("old", 4) + queues("new", 2)}
    committed = commit_offsets(as_client(Client(brokers)), "g", offsets)
    lost = MessageQueue("t0", "old", 1)
    assert sorted(committed) == sorted(q for q in offsets if q != lost)
    assert len(old.UpdateConsumerOffset.requests) == 4  # each tried, the failing one too
    assert len(brokers["new"].UpdateConsumerOffset.requests) == 0


def test_a_failed_batch_leaves_its_queues_for_the_next_round() -> None:
    def unavailable(request: Any) -> Any:
        raise Refused(grpc.StatusCode.UNAVAILABLE)

    down = Broker(batched=True)
    down.UpdateConsumerOffsets = Method(unavailable)
    brokers = {"down": down, "up": Broker(batched=True)}
    offsets = {q: 1 for q in queues("down", 3) + queues("up", 3)}
    committed = commit_offsets(as_client(Client(brokers)), "g", offsets)
    assert sorted(committed) == sorted(q for q in offsets if q.broker_name == "up")
    assert brokers["down"].UpdateConsumerOffset.requests == []  # no per-queue retry on UNAVAILABLE
