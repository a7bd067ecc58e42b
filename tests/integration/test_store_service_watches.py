"""StoreService arrival streams end to end: WatchArrivals and WatchQueues.

WatchArrivals tells of every append and ends with RESOURCE_EXHAUSTED when too
many queues are pending; WatchQueues answers only the queues a client waits
on, each once, and ends a malformed interest naming its field.
"""

from __future__ import annotations

import queue
from pathlib import Path

import grpc
import pytest

from boltmq.v1 import store_pb2
from services.store.arrival_streams import WATCHING_METADATA
from tests.integration.store_service_helpers import (
    Spawn,
    append,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    msg,
    start_store,
)


def test_watch_arrivals_sees_an_append(spawn: Spawn, connect, tmp_path: Path) -> None:
    stub = connect(start_store(spawn, tmp_path / "s", "arrival_watch_queue_max=2"))
    watch = stub.WatchArrivals(store_pb2.WatchArrivalsRequest())
    # The metadata comes once the stream listens: every later arrival reaches it.
    assert tuple(watch.initial_metadata()) == WATCHING_METADATA
    append(stub, msg("Events", 2, b"a"), msg("Events", 2, b"b"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Events", 2, 2)
    append(stub, msg("Events", 3, b"c"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Events", 3, 1)
    # One batch touching more queues than a stream may have pending: the stream
    # ends with a clear error instead of growing or silently dropping a wake-up.
    append(stub, *(msg("Events", q, b"burst") for q in range(4, 7)))
    with pytest.raises(grpc.RpcError) as info:
        next(watch)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than 2 queues" in str(info.value.details())
    # A new stream starts afresh.
    again = stub.WatchArrivals(store_pb2.WatchArrivalsRequest())
    again.initial_metadata()
    append(stub, msg("Events", 2, b"c"))
    assert next(again).max_offset == 3
    again.cancel()


def test_watch_queues_answers_only_what_is_waited_on(spawn: Spawn, connect, tmp_path: Path) -> None:
    stub = connect(start_store(spawn, tmp_path / "s"))
    append(stub, msg("Q", 0, b"a"))
    interests: queue.Queue[store_pb2.QueueInterest | None] = queue.Queue()
    watch = stub.WatchQueues(iter(interests.get, None))
    assert tuple(watch.initial_metadata()) == WATCHING_METADATA
    # Already past the offset: answered at once.
    interests.put(store_pb2.QueueInterest(topic="Q", queue_id=0, after_offset=0))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 0, 1)
    # Waiting at the end: the next append answers; queue 1, never named, sends nothing.
    interests.put(store_pb2.QueueInterest(topic="Q", queue_id=0, after_offset=1))
    append(stub, msg("Q", 1, b"unwatched"))
    append(stub, msg("Q", 0, b"b"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 0, 2)
    # Answered once, then forgotten: this append reaches nobody, the named queue 2 does.
    append(stub, msg("Q", 0, b"c"))
    interests.put(store_pb2.QueueInterest(topic="Q", queue_id=2, after_offset=0))
    append(stub, msg("Q", 2, b"d"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 2, 1)
    # One message naming three queues (``more``): each is watched as if named alone.
    interests.put(
        store_pb2.QueueInterest(
            topic="Q",
            queue_id=3,
            after_offset=0,
            more=[
                store_pb2.QueueInterest(topic="Q", queue_id=0, after_offset=1),
                store_pb2.QueueInterest(topic="R", queue_id=1, after_offset=0),
            ],
        )
    )
    arrival = next(watch)  # queue 0 already ends past 1
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 0, 3)
    append(stub, msg("R", 1, b"e"))
    append(stub, msg("Q", 3, b"f"))
    assert {(a.topic, a.queue_id, a.max_offset) for a in (next(watch), next(watch))} == {
        ("R", 1, 1),
        ("Q", 3, 1),
    }
    # A malformed interest ends the stream, naming the field.
    inner = store_pb2.QueueInterest(topic="Q")
    for bad, field in (
        (store_pb2.QueueInterest(topic="a/b"), "topic"),
        (store_pb2.QueueInterest(topic="Q", queue_id=-1), "queue_id"),
        (store_pb2.QueueInterest(topic="Q", after_offset=-1), "after_offset"),
        (
            store_pb2.QueueInterest(topic="Q", more=[inner, store_pb2.QueueInterest(topic="..")]),
            "more[1].topic",
        ),
        (
            store_pb2.QueueInterest(
                topic="Q", more=[store_pb2.QueueInterest(topic="Q", more=[inner])]
            ),
            "more[0].more",
        ),
    ):
        stream = stub.WatchQueues(iter([bad]))
        with pytest.raises(grpc.RpcError) as info:
            next(stream)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert str(info.value.details()).startswith(f"{field}: ")
    interests.put(None)
    watch.cancel()
