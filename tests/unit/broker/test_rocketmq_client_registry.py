"""The RocketMQ 5 protocol's client registry: what a client asked for, until it goes."""

from __future__ import annotations

from boltmq.rocketmq.v2 import definition_pb2 as v2
from services.broker.rocketmq_v2.client_registry import ClientRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_clients_fifo_wish_lasts_until_it_terminates_or_goes_silent() -> None:
    clock = Clock()
    clients = ClientRegistry(3000, clock)
    clients.seen("c1", v2.SIMPLE_CONSUMER, "g", frozenset({"T"}), fifo=True)
    clients.seen("c2", v2.SIMPLE_CONSUMER, "g", frozenset({"T"}), fifo=False)
    assert clients.fifo("c1") and not clients.fifo("c2") and not clients.fifo("unknown")
    clients.seen("c1", v2.SIMPLE_CONSUMER)  # a heartbeat keeps what Settings said
    assert clients.fifo("c1")
    clients.forget("c1")
    assert not clients.fifo("c1")
    clients.seen("c3", v2.SIMPLE_CONSUMER, "g", fifo=True)
    clock.now += 3.5  # silent past the expiry
    assert not clients.fifo("c3")
    clients.seen("c4", v2.PRODUCER)  # a later record drops the expired ones
    clients.seen("c3", v2.SIMPLE_CONSUMER)
    assert not clients.fifo("c3")  # it comes back as a new client, without its wish
