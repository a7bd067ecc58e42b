"""``python -m bench store``: in-process benchmarks of the message store.

Scenarios (1 KiB bodies, 16 queues, ASYNC_FLUSH unless named):
- ``batch``: ``put_messages`` in batches (default 256), counted until the
  dispatcher has caught up;
- ``raw``: ``put_messages`` of raw record batches (the broker's form), one
  queue a batch, counted the same way; ``raw-ids``: the same with a UNIQ_KEY
  property on every record, as the SDK sends them;
- ``raw-multi``: groups of 16 raw appends of 1-2 records, each to its own topic
  (what one AppendStream message of a busy broker holds), one
  ``put_record_batches`` call a group; ``raw-split``: the same appends one
  ``put_messages`` each (what the store did with such a message before);
- ``single``: ``put_message`` one by one, counted the same way;
- ``get``: sequential ``get_messages`` (32 per call) over every queue;
- ``sync``: SYNC_FLUSH with concurrent writer threads (group commit);
- ``recovery``: crash recovery (abort file present, no checkpoint) of a
  CommitLog of the given size.

Each prints msg/s, MB/s and latency percentiles of the calls; ``--json`` prints
one JSON object per line instead. These are measurements, never tests.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.report import BenchResult, result, timed_threads
from boltmq.wire.record_batch import RecordBatch, encode_send_record
from services.store import MessageStore, PutStatus, StoreConfig, StoreMessage

QUEUES = 16
GET_BATCH = 32
SEGMENT_BYTES = 1024 * 1024 * 1024


_result = result


@contextmanager
def _store(directory: Path | None, **overrides: object) -> Iterator[MessageStore]:
    root = Path(tempfile.mkdtemp(prefix="boltmq-bench-", dir=directory))
    config = StoreConfig(root_dir=root, mapped_file_size_commitlog=SEGMENT_BYTES, **overrides)  # type: ignore[arg-type]
    store = MessageStore(config)
    store.start()
    # Create the first segment (and start pre-allocating the second) before the
    # clock starts: a one-time cost of a new store, not part of steady state.
    store.put_message(StoreMessage(topic="BenchWarmUp", body=b"", queue_id=0))
    try:
        yield store
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _messages(count: int, body: bytes, topic: str = "BenchTopic") -> list[StoreMessage]:
    """The input messages, built before the clock starts.

    They are frozen out of the garbage collector: the harness holding 200,000
    inputs would otherwise make every full collection rescan them, a cost a
    producer streaming its messages never pays (measured: up to 40 % of the
    batch scenario).
    """
    msgs = [
        StoreMessage(topic=topic, body=body, queue_id=i % QUEUES, tags="TagA") for i in range(count)
    ]
    gc.collect()
    gc.freeze()
    return msgs


def bench_batch(count: int, body_bytes: int, batch: int, directory: Path | None) -> BenchResult:
    msgs = _messages(count, b"x" * body_bytes)
    samples = []
    with _store(directory) as store:
        start = time.perf_counter()
        for i in range(0, count, batch):
            t0 = time.perf_counter_ns()
            results = store.put_messages(msgs[i : i + batch])
            samples.append(time.perf_counter_ns() - t0)
            if results[-1].status is not PutStatus.PUT_OK:
                raise RuntimeError(f"put failed: {results[-1]}")
        store.wait_dispatched(600)
        seconds = time.perf_counter() - start
    return _result("batch", count, seconds, body_bytes, samples, f"batch={batch}, latency per call")


def bench_raw(
    count: int, body_bytes: int, batch: int, directory: Path | None, unique_ids: bool = False
) -> BenchResult:
    """``put_messages`` of raw record batches, one queue a batch (queues in turn): what a
    broker appends (the SDK encodes, the store checks and stamps); ``unique_ids``: each
    record with its own UNIQ_KEY (32 hex digits), as the SDK sends them."""
    body = b"x" * body_bytes

    def records(queue: int) -> bytes:
        if not unique_ids:
            return encode_send_record("BenchRaw", body) * batch
        return b"".join(
            encode_send_record("BenchRaw", body, properties={"UNIQ_KEY": f"{queue:016X}{n:016X}"})
            for n in range(batch)
        )

    batches = [RecordBatch(records(queue), batch, "BenchRaw", queue) for queue in range(QUEUES)]
    samples = []
    calls = max(1, count // batch)
    with _store(directory) as store:
        start = time.perf_counter()
        for n in range(calls):
            t0 = time.perf_counter_ns()
            results = store.put_messages(batches[n % QUEUES])
            samples.append(time.perf_counter_ns() - t0)
            if results[-1].status is not PutStatus.PUT_OK:
                raise RuntimeError(f"put failed: {results[-1]}")
        store.wait_dispatched(600)
        seconds = time.perf_counter() - start
    return _result(
        "raw-ids" if unique_ids else "raw",
        calls * batch,
        seconds,
        body_bytes,
        samples,
        f"raw records{' with UNIQ_KEY' if unique_ids else ''}, batch={batch} to one queue, "
        "latency per call",
    )


GROUP = 16
"""Appends in one group of ``raw-multi`` / ``raw-split``, each to its own topic."""


def bench_raw_groups(
    count: int, body_bytes: int, directory: Path | None, *, together: bool
) -> BenchResult:
    """Groups of GROUP raw appends of 1 or 2 records over GROUP topics (a queue per group,
    queues in turn): one ``put_record_batches`` a group (``together``) or one
    ``put_messages`` an append."""
    records = [encode_send_record(f"BenchMulti{t}", b"x" * body_bytes) for t in range(GROUP)]
    groups = [
        [
            RecordBatch(record * (1 + (g + t) % 2), 1 + (g + t) % 2, f"BenchMulti{t}", g)
            for t, record in enumerate(records)
        ]
        for g in range(QUEUES)
    ]
    borns: list[tuple[str, int] | None] = [("10.0.0.1", 4000)] * GROUP
    per_group = sum(b.count for b in groups[0])
    calls = max(1, count // per_group)
    samples = []
    with _store(directory) as store:
        for group in groups:  # every queue's files exist before the clock starts
            store.put_record_batches(group, borns)
        store.wait_dispatched(600)
        start = time.perf_counter()
        for n in range(calls):
            group = groups[n % QUEUES]
            t0 = time.perf_counter_ns()
            if together:
                results = store.put_record_batches(group, borns)
            else:
                results = [store.put_messages(b, borns[0]) for b in group]
            samples.append(time.perf_counter_ns() - t0)
            if results[-1][-1].status is not PutStatus.PUT_OK:
                raise RuntimeError(f"put failed: {results[-1][-1]}")
        store.wait_dispatched(600)
        seconds = time.perf_counter() - start
    return _result(
        "raw-multi" if together else "raw-split",
        calls * per_group,
        seconds,
        body_bytes,
        samples,
        f"groups of {GROUP} appends of 1-2 raw records over {GROUP} topics, "
        f"{'one call' if together else 'one call an append'}, latency per group",
    )


def bench_single(count: int, body_bytes: int, directory: Path | None) -> BenchResult:
    msgs = _messages(count, b"x" * body_bytes)
    samples = []
    with _store(directory) as store:
        put = store.put_message
        clock = time.perf_counter_ns
        start = time.perf_counter()
        for msg in msgs:
            t0 = clock()
            put(msg)
            samples.append(clock() - t0)
        store.wait_dispatched(600)
        seconds = time.perf_counter() - start
    return _result("single", count, seconds, body_bytes, samples)


def bench_get(count: int, body_bytes: int, directory: Path | None) -> BenchResult:
    msgs = _messages(count, b"x" * body_bytes)
    samples = []
    with _store(directory) as store:
        for i in range(0, count, 256):
            store.put_messages(msgs[i : i + 256])
        store.wait_dispatched(600)
        got = 0
        start = time.perf_counter()
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                t0 = time.perf_counter_ns()
                result = store.get_messages("BenchTopic", queue_id, offset, GET_BATCH)
                samples.append(time.perf_counter_ns() - t0)
                if not result.messages:
                    break
                got += len(result.messages)
                offset = result.next_begin_offset
        seconds = time.perf_counter() - start
    if got != count:
        raise RuntimeError(f"read {got} of {count} messages")
    return _result("get", got, seconds, body_bytes, samples, f"{GET_BATCH} per call")


def bench_sync(count: int, body_bytes: int, writers: int, directory: Path | None) -> BenchResult:
    """SYNC_FLUSH group commit with ``writers`` concurrent asyncio writers.

    This is how the store service appends: requests are tasks on one event loop
    and the flusher wakes every task of a round with one callback.
    """
    body = b"x" * body_bytes
    per_writer = count // writers
    samples: list[list[int]] = [[] for _ in range(writers)]
    with _store(directory, flush_disk_type="SYNC_FLUSH") as store:
        assert store.flusher is not None
        fsyncs_before = store.flusher.fsync_count

        async def writer(n: int) -> None:
            out = samples[n]
            batch = [StoreMessage(topic="BenchTopic", body=body, queue_id=n % QUEUES, tags="TagA")]
            for _ in range(per_writer):
                t0 = time.perf_counter_ns()
                result = (await store.put_messages_async(batch))[0]
                out.append(time.perf_counter_ns() - t0)
                if result.status is not PutStatus.PUT_OK:
                    raise RuntimeError(f"put failed: {result}")

        async def run_all() -> float:
            start = time.perf_counter()
            await asyncio.gather(*(writer(n) for n in range(writers)))
            return time.perf_counter() - start

        seconds = asyncio.run(run_all())
        fsyncs = store.flusher.fsync_count - fsyncs_before
    return _sync_result(
        "sync", per_writer * writers, seconds, body_bytes, samples, writers, fsyncs, "tasks"
    )


def bench_sync_threads(
    count: int, body_bytes: int, writers: int, directory: Path | None
) -> BenchResult:
    """SYNC_FLUSH group commit with ``writers`` threads calling the blocking put_message."""
    body = b"x" * body_bytes
    per_writer = count // writers
    with _store(directory, flush_disk_type="SYNC_FLUSH") as store:
        assert store.flusher is not None
        fsyncs_before = store.flusher.fsync_count

        def setup(n: int) -> Callable[[], None]:
            msg = StoreMessage(topic="BenchTopic", body=body, queue_id=n % QUEUES, tags="TagA")

            def put() -> None:
                result = store.put_message(msg)
                if result.status is not PutStatus.PUT_OK:
                    raise RuntimeError(f"put failed: {result}")

            return put

        seconds, samples = timed_threads(writers, setup, per_writer)
        fsyncs = store.flusher.fsync_count - fsyncs_before
    return _sync_result(
        "sync-thr", per_writer * writers, seconds, body_bytes, [samples], writers, fsyncs, "threads"
    )


def _sync_result(
    name: str,
    total: int,
    seconds: float,
    body_bytes: int,
    samples: list[list[int]],
    writers: int,
    fsyncs: int,
    kind: str,
) -> BenchResult:
    flat = [s for per in samples for s in per]
    return _result(
        name,
        total,
        seconds,
        body_bytes,
        flat,
        f"{writers} writer {kind}, {fsyncs} fsync rounds, "
        f"{total / max(fsyncs, 1):.1f} messages per fsync",
    )


def bench_recovery(commitlog_bytes: int, body_bytes: int, directory: Path | None) -> BenchResult:
    root = Path(tempfile.mkdtemp(prefix="boltmq-bench-", dir=directory))
    try:
        config = StoreConfig(root_dir=root, mapped_file_size_commitlog=SEGMENT_BYTES)
        store = MessageStore(config)
        store.start()
        body = b"x" * body_bytes
        batch = _messages(256, body)
        while store.commitlog.max_offset < commitlog_bytes:
            store.put_messages(batch)
        store.shutdown()
        size = store.commitlog.max_offset
        # Simulate a crash: abort file present and a checkpoint that proves nothing.
        (root / "abort").touch()
        (root / "checkpoint").unlink()
        recovered = MessageStore(config)
        start = time.perf_counter()
        report = recovered.start()
        seconds = time.perf_counter() - start
        count = sum(recovered.max_offset("BenchTopic", q) for q in range(QUEUES))
        recovered.shutdown()
        outcome = _result(
            "recovery",
            count,
            seconds,
            body_bytes,
            [],
            f"{size / 2**20:.0f} MiB CommitLog re-validated and re-dispatched "
            f"from offset {report.start_offset}",
        )
        outcome.mb_per_s = round(size / seconds / 1e6, 1)
        return outcome
    finally:
        shutil.rmtree(root, ignore_errors=True)
