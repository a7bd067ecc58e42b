"""CPU per record of the store's append, in process: the CommitLog write path alone.

A MessageStore (ASYNC_FLUSH, 64 MiB segments) in a temporary directory takes
``--batches`` raw batches of 1,024 x 1 KiB records, the form a broker sends,
to one queue. It prints the wall rate and the process's CPU seconds per
record (every thread: appends, dispatch, flush). ``--warm-bytes`` sets
``warm_mapped_file_ahead_bytes`` (0: the page warmer off, the default), so the
cost of fresh pages can be compared with and without faulting them in ahead
(bench/RESULTS.md, session 7).

    .venv/bin/python bench/append_cpu.py [--warm-bytes 33554432] [--batches 1500]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from services.store.config import StoreConfig
from services.store.record_batch import RecordBatch, encode_send_record
from services.store.store import MessageStore

BATCH = 1024
SEGMENT_BYTES = 64 * 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-bytes", type=int, default=0)
    parser.add_argument("--batches", type=int, default=1500)
    args = parser.parse_args()
    if args.warm_bytes < 0 or args.batches < 1:
        parser.error("--warm-bytes must be >= 0 and --batches >= 1")
    root = Path(tempfile.mkdtemp(prefix="append-cpu-"))
    store = MessageStore(StoreConfig(root_dir=root, flush_disk_type="ASYNC_FLUSH",
                                     warm_mapped_file_ahead_bytes=args.warm_bytes,
                                     mapped_file_size_commitlog=SEGMENT_BYTES))
    try:
        store.start()
        records = encode_send_record("Bench", b"x" * 1024) * BATCH
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(args.batches):
            store.put_messages(RecordBatch(records, BATCH, "Bench", 0))
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    count = args.batches * BATCH
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"warm {args.warm_bytes}: {count / wall:,.0f} msg/s (wall), "
          f"{cpu / count * 1e6:.2f} us CPU per record ({cpu:.1f} s for {count:,} records)")


if __name__ == "__main__":
    main()
