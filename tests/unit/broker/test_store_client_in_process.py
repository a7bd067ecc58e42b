"""The broker's StoreClient on a store served by the same process (a broker serving its
store): a real MessageStore behind the real StoreService handlers, reached through
boltmq.kernel.in_process. Appends go as unary calls (nothing is written on the append
stream), what is stored reads back, and a refused append is the same named error a
remote store's code gives. Several batches written at once go as one Append of runs,
answered with an entry a record in order (a batch of a topic no append may name refused
record by record, the others stored), and the store counts it as one call in its put
histogram; an answer with another number of entries is a store failure.
Every append, stored or refused, is told to ``on_written`` for each queue it wrote to
(the long-poll hub forgets what it kept of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from boltmq.kernel import in_process
from boltmq.message import Message
from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record_batch import RecordBatch
from services.broker.errors import InvalidArgument, StoreFailed
from services.broker.store.store_client import StoreClient
from services.store.config import StoreConfig
from services.store.metrics import StoreMetrics
from services.store.server import StoreService

ADDRESS = "127.0.0.1:1"  # nothing listens there: only the in-process handlers answer


@contextlib.asynccontextmanager
async def served_store(
    root: Path, told: list[tuple[str, int]], meters: MeterProvider | None = None
) -> AsyncIterator[StoreClient]:
    """A client of a store served in this process at ADDRESS (its metrics on ``meters``)."""
    service = StoreService(StoreConfig(root_dir=str(root)))
    if meters is not None:
        service.servicer.metrics = StoreMetrics(service.store, meters)
    table = in_process.HandlerTable()
    service.add_to(table)
    await service.start()
    in_process.serve_here(ADDRESS, table)
    client = StoreClient(ADDRESS, timeout_ms=10_000, on_written=lambda *queue: told.append(queue))
    try:
        yield client
    finally:
        in_process.withdraw(ADDRESS)
        await client.close()
        await service.stop()


def test_appends_to_a_store_in_this_process_are_calls_and_read_back(tmp_path: Path) -> None:
    told: list[tuple[str, int]] = []

    async def scenario() -> tuple[bool, tuple[int, int], list[int], list[bytes], str]:
        async with served_store(tmp_path, told) as client:
            stored = await client.append(
                [message_pb2.Message(topic="T", queue_id=1, body=b"m%d" % n) for n in range(3)],
                "127.0.0.1:9",
            )
            await client.append([message_pb2.Message(topic="U", queue_id=0, body=b"u")], "")
            pulled = await client.pull(
                store_pb2.PullRequest(topic="T", queue_id=1, queue_offset=0, max_messages=10)
            )
            with pytest.raises(InvalidArgument) as refused:
                await client.append_records(RecordBatch(b"", 1, "T", 1), "")
            return (
                client.in_process,
                client.appends_written,
                list(stored.queue_offsets),
                [bytes(m.body) for m in pulled.messages],
                str(refused.value),
            )

    in_process_, written, offsets, bodies, refusal = asyncio.run(scenario())
    assert in_process_ and written == (0, 0)  # no stream message: each append was a call
    assert offsets == [0, 1, 2]
    assert bodies == [b"m0", b"m1", b"m2"]
    assert refusal == "records: empty, but record_count is 1"
    assert told == [("T", 1), ("U", 0), ("T", 1)]  # once per append, the refused one too


def test_appends_written_at_once_to_a_store_in_this_process_are_one_call(
    tmp_path: Path,
) -> None:
    told: list[tuple[str, int]] = []

    def batch(topic: str, queue_id: int, *bodies: bytes) -> RecordBatch:
        records = b"".join(Message(topic, body).to_record() for body in bodies)
        return RecordBatch(records, len(bodies), topic, queue_id)

    reader = InMemoryMetricReader()

    async def scenario() -> tuple[tuple[int, int], store_pb2.AppendResponse, list[list[bytes]]]:
        async with served_store(tmp_path, told, MeterProvider(metric_readers=[reader])) as client:
            answer = await client.append_runs(
                [
                    batch("A", 0, b"a0", b"a1"),
                    batch("bad topic!", 0, b"x"),
                    batch("B", 2, b"b0"),
                    batch("A", 0, b"a2"),
                ],
                "127.0.0.1:9",
            )
            pulled = [
                await client.pull(
                    store_pb2.PullRequest(topic=t, queue_id=q, queue_offset=0, max_messages=10)
                )
                for t, q in (("A", 0), ("B", 2))
            ]
            return (
                client.appends_written,
                answer,
                [[bytes(m.body) for m in p.messages] for p in pulled],
            )

    written, answer, bodies = asyncio.run(scenario())
    assert written == (0, 0)  # no stream message: one Append call
    assert list(answer.queue_offsets) == [0, 1, -1, 0, 2]  # an entry a record, in order
    ok, illegal = message_pb2.PUT_OK, message_pb2.MESSAGE_ILLEGAL
    assert list(answer.statuses) == [ok, ok, illegal, ok, ok]  # that batch alone refused
    assert list(answer.errors) == [2] and "bad topic!" in answer.errors[2]  # why, at its place
    assert bodies == [[b"a0", b"a1", b"a2"], [b"b0"]]
    assert told == [("A", 0), ("bad topic!", 0), ("B", 2), ("A", 0)]
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    assert points["boltmq.store.put.duration"].count == 1  # one engine call
    assert points["boltmq.store.put.messages"].value == 5  # the refused one's result too


def test_an_answer_of_runs_with_another_number_of_entries_is_a_store_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = [RecordBatch(Message("A", b"a").to_record(), 1, "A", 0)] * 2

    async def short(
        request: store_pb2.AppendRequest, written: object = None
    ) -> store_pb2.AppendResponse:
        return store_pb2.AppendResponse(statuses=[0], commitlog_offsets=[1], queue_offsets=[0])

    async def scenario() -> str:
        async with served_store(tmp_path, []) as client:
            monkeypatch.setattr(client, "_append", short)
            with pytest.raises(StoreFailed) as failed:
                await client.append_runs(batches, "")
            return str(failed.value)

    assert "1 results for 2 records" in asyncio.run(scenario())
