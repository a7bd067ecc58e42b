"""QueueInterests: what the hub names reaches the store's open stream, and only that."""

from __future__ import annotations

import asyncio

from boltmq.v1 import store_pb2
from services.broker.arrivals.arrival_watcher import QueueInterests
from services.broker.arrivals.long_poll import LongPollHub


def test_a_queue_named_while_no_stream_is_open_is_dropped() -> None:
    interests = QueueInterests()
    interests.name("orders", 0, 5)
    stream: asyncio.Queue[store_pb2.QueueInterest] = asyncio.Queue()
    interests.attach(stream)
    assert stream.empty()


def test_the_hub_names_its_queues_on_the_attached_stream_until_it_closes() -> None:
    async def scenario() -> None:
        interests = QueueInterests()
        hub = LongPollHub(max_parked=10, on_wait=interests.name)
        stream: asyncio.Queue[store_pb2.QueueInterest] = asyncio.Queue()
        interests.attach(stream)
        assert await hub.wait("orders", 2, 7, hub.token("orders", 2), 0.01) is False
        named = stream.get_nowait()
        assert (named.topic, named.queue_id, named.after_offset) == ("orders", 2, 7)
        assert interests.detach() is True  # it was open
        assert interests.detach() is False
        hub.wake_all()  # a new stream: the store watches nothing
        assert await hub.wait("orders", 3, 1, hub.token("orders", 3), 0.01) is False
        assert stream.empty()

    asyncio.run(scenario())
