"""The broker's StoreClient on a store served by the same process (a broker serving its
store): a real MessageStore behind the real StoreService handlers, reached through
boltmq.kernel.in_process. Appends go as unary calls (nothing is written on the append
stream), what is stored reads back, and a refused append is the same named error a
remote store's code gives. Every append, stored or refused, is told to ``on_written``
for each queue it wrote to (the long-poll hub forgets what it kept of them).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from boltmq.kernel import in_process
from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record_batch import RecordBatch
from services.broker.errors import InvalidArgument
from services.broker.store.store_client import StoreClient
from services.store.config import StoreConfig
from services.store.server import StoreService

ADDRESS = "127.0.0.1:1"  # nothing listens there: only the in-process handlers answer


def test_appends_to_a_store_in_this_process_are_calls_and_read_back(tmp_path: Path) -> None:
    told: list[tuple[str, int]] = []

    async def scenario() -> tuple[bool, tuple[int, int], list[int], list[bytes], str]:
        service = StoreService(StoreConfig(root_dir=str(tmp_path)))
        table = in_process.HandlerTable()
        service.add_to(table)
        await service.start()
        in_process.serve_here(ADDRESS, table)
        client = StoreClient(
            ADDRESS, timeout_ms=10_000, on_written=lambda *queue: told.append(queue)
        )
        try:
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
        finally:
            in_process.withdraw(ADDRESS)
            await client.close()
            await service.stop()

    in_process_, written, offsets, bodies, refusal = asyncio.run(scenario())
    assert in_process_ and written == (0, 0)  # no stream message: each append was a call
    assert offsets == [0, 1, 2]
    assert bodies == [b"m0", b"m1", b"m2"]
    assert refusal == "records: empty, but record_count is 1"
    assert told == [("T", 1), ("U", 0), ("T", 1)]  # once per append, the refused one too
