"""The SDK's answers to bad input and an unreachable registry: clear, named errors."""

from __future__ import annotations

import pytest

from boltmq import (
    BoltMQError,
    Message,
    MessageError,
    Producer,
    PullConsumer,
    PushConsumer,
    PushConsumerOptions,
    RegistryUnavailable,
    SendStatus,
    TopicNotFound,
)
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import producer as producer
from tests.waiting import wait_until


def test_bad_sdk_inputs_raise_clear_named_errors(cluster: Cluster, producer: Producer) -> None:
    registry = cluster.registry.address
    with pytest.raises(MessageError, match="topic"):
        producer.send(Message(topic="", body=b"x"))
    with pytest.raises(MessageError, match="body must be bytes"):
        producer.send(Message(topic="t", body="text"))  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="keys"):
        producer.send(Message(topic="t", body=b"x", keys="order-1"))
    with pytest.raises(MessageError, match="body must be bytes"):
        producer.send_async(Message(topic="t", body=None))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Message.topic, body. objects, not str"):
        producer.send("t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not bytes"):
        producer.send_batch([Message(topic="t", body=b"x"), b"y"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not str"):
        producer.send_async("t")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same topic"):
        producer.send_batch([Message(topic="a", body=b"x"), Message(topic="b", body=b"x")])
    with pytest.raises(ValueError, match="subscription"):
        PushConsumer(registry, "cg", {"t": "A ||"}, lambda msgs: None)
    with pytest.raises(ValueError, match="model"):
        PushConsumer(
            registry,
            "cg",
            {"t": "*"},
            lambda msgs: None,
            options=PushConsumerOptions(model="SOMETIMES"),
        )
    for option in ("consume_threads", "pull_batch_size", "pull_max_bytes"):
        for value in (0, -1):
            with pytest.raises(ValueError, match="must be positive"):
                PushConsumer(
                    registry,
                    "cg",
                    {"t": "*"},
                    lambda msgs: None,
                    options=PushConsumerOptions(**{option: value}),
                )
    with pytest.raises(ValueError, match="registry"):
        Producer("no-port-here")
    never = PushConsumer(registry, "cg-none", {"no-such-topic": "*"}, lambda msgs: None)
    with pytest.raises(TopicNotFound, match="no-such-topic"):
        never.start()
    never.shutdown()  # a consumer that failed to start still closes quietly
    producer.send(Message(topic="known", body=b"x"))  # the broker creates it
    wait_until(lambda: "known" not in producer.client.routes(["known"]), "the route of known")
    several = PushConsumer(
        registry,
        "cg-several",
        dict.fromkeys(["known", "no-such-a", "no-such-b", "no-such-c"], "*"),
        lambda msgs: None,
    )
    with pytest.raises(TopicNotFound, match=r"'no-such-a'.*nor 2 more") as caught:
        several.start()  # one registry call named them all; the first is named
    assert caught.value.topic == "no-such-a"
    several.shutdown()
    with PullConsumer(registry, "cg") as puller, pytest.raises(TopicNotFound):
        puller.queues("no-such-topic")
    told = Producer(registry, "pg-told").start(["known", "not-yet"])
    try:  # the known topic's route came with start; the unknown one is created by its send
        assert [r.status for r in told.send_batch([Message(topic="not-yet", body=b"x")])] == [
            SendStatus.SEND_OK
        ]
        assert told.send(Message(topic="known", body=b"y")).status is SendStatus.SEND_OK
    finally:
        told.shutdown()
    idle = Producer(registry)
    with pytest.raises(BoltMQError, match="not started"):
        idle.send(Message(topic="t", body=b"x"))


def test_an_unreachable_registry_raises_registry_unavailable(cluster: Cluster) -> None:
    dead = "127.0.0.1:1"
    with Producer(dead, "pg") as producer, pytest.raises(RegistryUnavailable, match=dead):
        producer.send(Message(topic="t", body=b"x"))
    told = Producer(dead, "pg")
    with pytest.raises(RegistryUnavailable, match=dead):  # the topics' routes, at start
        told.start(["t", "u"])
    told.shutdown()
    with pytest.raises(RegistryUnavailable, match=dead):
        PushConsumer(dead, "cg", {"t": "*"}, lambda msgs: None).start()
    with PullConsumer(dead, "cg") as puller, pytest.raises(RegistryUnavailable, match=dead):
        puller.queues("t")
