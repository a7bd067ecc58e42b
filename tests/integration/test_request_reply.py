"""Request-reply end to end: Producer.request and request_async (future and callback), a
push consumer replying with boltmq.reply."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from boltmq import (
    Message,
    MessageError,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    RequestTimeout,
    SendError,
    reply,
)
from tests.integration.conftest import Cluster
from tests.waiting import wait_until

DEADLINE_S = 30.0
FAST: dict[str, Any] = dict(
    rebalance_interval_ms=300, long_poll_ms=2_000, commit_interval_ms=200, suspend_on_failure_ms=100
)


def replier(
    cluster: Cluster,
    topic: str,
    answer: Callable[[ReceivedMessage], bytes | None],
    responder: Producer,
) -> PushConsumer:
    """A consumer of ``topic`` that replies ``answer(msg)`` (None: no reply)."""

    def listener(msgs: list[ReceivedMessage]) -> None:
        for msg in msgs:
            body = answer(msg)
            if body is not None:
                reply(responder, msg, body)

    consumer = PushConsumer(
        registry=cluster.registry.address,
        group=f"{topic}-replier",
        subscriptions={topic: "*"},
        listener=listener,
        options=PushConsumerOptions(**FAST),
    )
    consumer.start()
    return consumer


def test_request_gets_its_reply(cluster: Cluster) -> None:
    with (
        Producer(registry=cluster.registry.address, group="rr") as requester,
        Producer(registry=cluster.registry.address, group="rr-responder") as responder,
    ):
        requester.send(Message(topic="Rpc", body=b"warm-up"))  # the topic exists, routed
        seen: list[dict[str, str]] = []

        def answer(msg: ReceivedMessage) -> bytes | None:
            if "CORRELATION_ID" not in msg.properties:
                return None
            seen.append(dict(msg.properties))
            return b"pong:" + bytes(msg.body)

        consumer = replier(cluster, "Rpc", answer, responder)
        try:
            got = [
                requester.request(Message(topic="Rpc", body=f"ping{i}".encode()), 20_000)
                for i in range(3)
            ]
            # async: 20 requests in flight at once, each answered through its future and
            # its callback (called once, with the reply and no error)
            called: dict[bytes, list[tuple[bytes | None, BaseException | None]]] = {}

            def callback_of(body: bytes) -> Callable[[Any, BaseException | None], None]:
                def callback(reply: Any, error: BaseException | None) -> None:
                    called.setdefault(body, []).append(
                        (None if reply is None else bytes(reply.body), error)
                    )

                return callback

            bodies = [f"async{i}".encode() for i in range(20)]
            futures = [
                requester.request_async(Message(topic="Rpc", body=b), 20_000, callback_of(b))
                for b in bodies
            ]
            replies = [bytes(f.result(DEADLINE_S).body) for f in futures]
            wait_until(lambda: len(called) == len(bodies), "every callback")
        finally:
            consumer.shutdown()
    assert replies == [b"pong:" + b for b in bodies]
    assert called == {b: [(b"pong:" + b, None)] for b in bodies}
    assert [bytes(m.body) for m in got] == [b"pong:ping0", b"pong:ping1", b"pong:ping2"]
    seen = seen[:3]  # the synchronous ones
    assert [m.properties["CORRELATION_ID"] for m in got] == [p["CORRELATION_ID"] for p in seen]
    assert all(p["REPLY_TO_CLIENT"] == requester.client.client_id for p in seen)
    assert all(p["MESSAGE_TTL"] == "20000" and p["CLUSTER"] == "DefaultCluster" for p in seen)
    assert all(m.topic == "DefaultCluster_REPLY_TOPIC" for m in got)


def test_request_times_out_and_a_late_reply_is_dropped(cluster: Cluster) -> None:
    release = threading.Event()
    answered = threading.Event()

    def slow(msg: ReceivedMessage) -> bytes | None:
        if "CORRELATION_ID" not in msg.properties:
            return None
        release.wait(DEADLINE_S)  # the requester gives up first
        answered.set()
        return b"too late"

    with (
        Producer(registry=cluster.registry.address, group="rr2") as requester,
        Producer(registry=cluster.registry.address, group="rr2-responder") as responder,
    ):
        requester.send(Message(topic="SlowRpc", body=b"warm-up"))
        consumer = replier(cluster, "SlowRpc", slow, responder)
        try:
            with pytest.raises(RequestTimeout, match="no reply"):
                requester.request(Message(topic="SlowRpc", body=b"ping"), 500)
            errors: list[BaseException | None] = []
            future = requester.request_async(
                Message(topic="SlowRpc", body=b"ping-async"), 300, lambda r, e: errors.append(e)
            )
            with pytest.raises(RequestTimeout, match="within 300 ms"):
                future.result(DEADLINE_S)
            wait_until(lambda: errors, "the callback of the request that timed out")
            assert len(errors) == 1 and isinstance(errors[0], RequestTimeout)
            release.set()
            assert answered.wait(DEADLINE_S)
            pending = requester._requester
            assert pending is not None
            wait_until(lambda: pending.late_replies == 2, "the late replies to reach the requester")
            assert pending.waiting == 0  # nothing kept for the requests that gave up
        finally:
            consumer.shutdown()


def test_reply_refuses_a_message_that_is_not_a_request(cluster: Cluster) -> None:
    class Plain:
        properties: dict[str, str] = {"TAGS": "x"}

    with Producer(registry=cluster.registry.address, group="rr3") as producer:
        with pytest.raises(MessageError, match="not a request message"):
            reply(producer, Plain(), b"x")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            producer.request(Message(topic="Rpc", body=b"x"), 0)
        with pytest.raises(ValueError, match="timeout_ms must be a positive int"):
            producer.request_async(Message(topic="Rpc", body=b"x"), -5)
        with pytest.raises(ValueError, match="callback must be callable"):
            producer.request_async(Message(topic="Rpc", body=b"x"), 100, "not callable")  # type: ignore[arg-type]
        # a request whose send fails ends with the send's error, through the future
        failed = producer.request_async(Message(topic="%DLQ%rr3", body=b"x"), 60_000)
        with pytest.raises(SendError, match="DLQ"):
            failed.result(DEADLINE_S)
        assert producer._requester is not None and producer._requester.waiting == 0
