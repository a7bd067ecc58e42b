"""CPU per record of the store's append, in process: the CommitLog write path alone.

A MessageStore (ASYNC_FLUSH, 64 MiB segments) in a temporary directory takes
``--batches`` raw batches of 1,024 x 1 KiB records, the form a broker sends,
to one queue. It prints the wall rate and the process's CPU seconds per
record (every thread: appends, dispatch, flush). ``--warm-bytes`` sets
``warm_mapped_file_ahead_bytes`` (0: the page warmer off, the default), so the
cost of fresh pages can be compared with and without faulting them in ahead
(bench/history/cluster.md, "the CommitLog is written with pwrite").
``--window-bytes`` sets ``commitlog_page_cache_window_bytes`` (default 1 GiB as
in the store; 0 keeps every written page cached): with ``--batches 6000``
(~6.3 GB) it shows what fresh pages cost once the machine has to find new ones
(bench/history/cluster.md, "only the newest flushed CommitLog stays in the page
cache"). Every 1,000 batches it prints that slice's CPU per record.

    .venv/bin/python -m bench.append_cpu [--warm-bytes 33554432] [--window-bytes 0]
        [--batches 1500]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from boltmq.wire.record_batch import RecordBatch, encode_send_record
from services.store.config import StoreConfig
from services.store.store import MessageStore

BATCH = 1024
SEGMENT_BYTES = 64 * 2**20
SLICE_BATCHES = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-bytes", type=int, default=0)
    parser.add_argument("--window-bytes", type=int, default=2**30)
    parser.add_argument("--batches", type=int, default=1500)
    args = parser.parse_args()
    if args.warm_bytes < 0 or args.window_bytes < 0 or args.batches < 1:
        parser.error("--warm-bytes and --window-bytes must be >= 0 and --batches >= 1")
    root = Path(tempfile.mkdtemp(prefix="append-cpu-"))
    store = MessageStore(
        StoreConfig(
            root_dir=root,
            flush_disk_type="ASYNC_FLUSH",
            warm_mapped_file_ahead_bytes=args.warm_bytes,
            commitlog_page_cache_window_bytes=args.window_bytes,
            mapped_file_size_commitlog=SEGMENT_BYTES,
        )
    )
    try:
        store.start()
        records = encode_send_record("Bench", b"x" * 1024) * BATCH
        before, started = _cpu_s(), time.perf_counter()
        slice_cpu = before
        for n in range(1, args.batches + 1):
            store.put_messages(RecordBatch(records, BATCH, "Bench", 0))
            if n % SLICE_BATCHES == 0:
                now = _cpu_s()
                print(
                    f"  batches {n - SLICE_BATCHES:>6,}-{n:<6,} "
                    f"{(now - slice_cpu) / (SLICE_BATCHES * BATCH) * 1e6:.2f} us CPU per record",
                    flush=True,
                )
                slice_cpu = now
        wall = time.perf_counter() - started
        after = _cpu_s()
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    count = args.batches * BATCH
    cpu = after - before
    print(
        f"warm {args.warm_bytes}, window {args.window_bytes}: {count / wall:,.0f} msg/s (wall), "
        f"{cpu / count * 1e6:.2f} us CPU per record ({cpu:.1f} s for {count:,} records)"
    )


def _cpu_s() -> float:
    """CPU seconds of this process so far, every thread, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
