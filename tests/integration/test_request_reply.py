"""Request-reply end to end: Producer.request, a push consumer replying with boltmq.reply."""

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
        finally:
            consumer.shutdown()
    assert [bytes(m.body) for m in got] == [b"pong:ping0", b"pong:ping1", b"pong:ping2"]
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
            release.set()
            assert answered.wait(DEADLINE_S)
            pending = requester._requester
            assert pending is not None
            wait_until(lambda: pending.late_replies == 1, "the late reply to reach the requester")
            assert pending.waiting == 0  # nothing kept for the request that gave up
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
