"""One record at a time over released CommitLog pages: read through the file, and through
the mapping as it was read before.

Run: .venv/bin/python -m bench.point_reads [--megabytes 2048] [--lookups 200] [--rounds 3]

It fills a store (one process, the default 1 GiB segments) with ``--megabytes`` of
1 KiB messages over 8 queues in a fresh directory beside the checkout, flushes it, then
alternates rounds of two ways of reading single records at random offsets, releasing
every cached page of every segment before each lookup (as the CommitLog's page-cache
window leaves what lies behind it): through the file (``MessageStore.look_message``,
services/store/point_reads.py) and through the segment's mapping
(``decode_record`` of the segment's view, as before). Each round also turns a random
record's store time back into its queue offset (``offset_by_time``, a binary search over
store times) both ways. It prints each round's percentiles and the bytes read from the
disk (``/proc/self/io``), and the medians as ratios.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.arm_rounds import percentile, print_medians, read_bytes
from boltmq.wire.record import RecordView, decode_record, store_timestamp_of
from services.store import MessageStore, StoreConfig, StoreMessage

BODY = 1024
QUEUES = 8
BATCH = 256


def fill(store: MessageStore, megabytes: int) -> list[int]:
    """The store filled, flushed; every record's CommitLog offset."""
    count = megabytes * 1024 * 1024 // (BODY + 100)
    body = bytes(BODY)
    offsets: list[int] = []
    for first in range(0, count, BATCH):
        messages = [
            StoreMessage(topic="T", queue_id=n % QUEUES, body=body)
            for n in range(first, min(count, first + BATCH))
        ]
        offsets.extend(result.commitlog_offset for result in store.put_messages(messages))
    store.flush()
    return offsets


def release(store: MessageStore) -> None:
    for segment in store.commitlog.files.files:
        segment.drop_cached(0, segment.file_size)


def through_mapping(store: MessageStore, offset: int) -> RecordView:
    segment = store.commitlog.files.find(offset)
    assert segment is not None
    return decode_record(segment.view, offset - segment.file_from_offset)


def mapped_store_time(store: MessageStore) -> Callable[[int, int], int | None]:
    def store_time_of(offset: int, size: int) -> int | None:
        segment = store.commitlog.files.find(offset)
        return (
            None
            if segment is None
            else store_timestamp_of(segment.view, offset - segment.file_from_offset)
        )

    return store_time_of


def one_round(
    store: MessageStore, offsets: list[int], lookups: int, by_file: bool, seed: int
) -> list[float]:
    """p50, p99 of a lookup (ms), MiB read for them, and one offset-by-time (ms, MiB)."""
    rng = random.Random(seed)
    took: list[float] = []
    read = 0
    for _ in range(lookups):
        offset = rng.choice(offsets)
        release(store)
        before = read_bytes()
        started = time.perf_counter()
        record = store.look_message(offset) if by_file else through_mapping(store, offset)
        took.append(1e3 * (time.perf_counter() - started))
        read += read_bytes() - before
        if record is None or record.commitlog_offset != offset:
            raise RuntimeError(f"no record read at {offset}")
    target = store.look_message(rng.choice(offsets))
    assert target is not None
    queue = store.queues.get("T", target.queue_id)
    assert queue is not None
    store_time = store.commitlog.store_time_of if by_file else mapped_store_time(store)
    release(store)
    before = read_bytes()
    started = time.perf_counter()
    found = queue.offset_by_time(target.store_timestamp, store_time)
    by_time_ms = 1e3 * (time.perf_counter() - started)
    by_time_read = read_bytes() - before
    if found > target.queue_offset:
        raise RuntimeError(f"offset by time {found} past {target.queue_offset}")
    return [
        percentile(took, 0.5),
        percentile(took, 0.99),
        read / 2**20,
        by_time_ms,
        by_time_read / 2**20,
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=2048, help="CommitLog to fill")
    parser.add_argument("--lookups", type=int, default=200, help="lookups a round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    parser.add_argument("--segment-mb", type=int, default=1024, help="CommitLog segment size")
    args = parser.parse_args(argv)
    if min(args.megabytes, args.lookups, args.rounds, args.segment_mb) < 1:
        parser.error("--megabytes, --lookups, --rounds and --segment-mb must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="boltmq-point-reads-", dir=Path.cwd()))
    store = MessageStore(
        StoreConfig(root_dir=root, mapped_file_size_commitlog=args.segment_mb * 1024 * 1024)
    )
    store.start()
    kinds: dict[bool, list[list[float]]] = {True: [], False: []}
    try:
        started = time.perf_counter()
        offsets = fill(store, args.megabytes)
        print(f"{len(offsets):,} records written in {time.perf_counter() - started:.0f} s")
        for n in range(2 * args.rounds):
            by_file = n % 2 == 1
            figures = one_round(store, offsets, args.lookups, by_file, n)
            kinds[by_file].append(figures)
            print(
                f"{'through the file' if by_file else 'through the map':16}"
                f"  p50 {figures[0]:7.2f}  p99 {figures[1]:7.2f} ms;"
                f"  {figures[2]:8.1f} MiB read for {args.lookups} lookups;"
                f"  offset by time {figures[3]:7.2f} ms, {figures[4]:6.1f} MiB"
            )
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print_medians(
        ("lookup p50 ms", "lookup p99 ms", "MiB read", "by time ms", "by time MiB"),
        ("through the file", kinds[True]),
        ("through the map", kinds[False]),
    )


if __name__ == "__main__":
    main()
