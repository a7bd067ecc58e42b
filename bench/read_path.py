"""Time per message of the two Python steps of a consume, in process: the store's raw
read and the consumer's decode.

A MessageStore (ASYNC_FLUSH) in a temporary directory holds ``--messages`` 1 KiB
messages on one queue. The script times, best of 5 rounds of ``--reads`` each:

- ``store read``: ``get_messages(raw=True)`` of ``--batch`` messages from offset 0,
  what a pull asks the store for (the consume queue's entries, every record's
  head and CRC checked, the records as views of the mapped segment);
- ``decode, record by record`` and ``decode, in bulk``: ``decode_records`` and
  ``decode_pulled`` over those records' bytes, what a consumer does with a pull's
  answer (every head, section and CRC checked, one RecordView per record).

It prints microseconds per message of each (wall time of one thread; nothing
else runs in the process).

    .venv/bin/python -m bench.read_path [--messages 4096] [--batch 1024] [--reads 100]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from boltmq.wire.pulled_records import decode_pulled
from boltmq.wire.record import decode_records
from boltmq.wire.record_batch import RecordBatch, encode_send_record
from services.store.config import StoreConfig
from services.store.status import GetResult
from services.store.store import MessageStore

ROUNDS = 5
APPEND_BATCH = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--reads", type=int, default=100)
    args = parser.parse_args()
    if min(args.messages, args.batch, args.reads) < 1 or args.batch > args.messages:
        parser.error("--messages, --batch and --reads must be >= 1, --batch <= --messages")
    root = Path(tempfile.mkdtemp(prefix="read-path-"))
    store = MessageStore(StoreConfig(root_dir=root, flush_disk_type="ASYNC_FLUSH"))
    try:
        store.start()
        for start in range(0, args.messages, APPEND_BATCH):
            count = min(APPEND_BATCH, args.messages - start)
            records = b"".join(
                encode_send_record("Bench", bytes([n % 251]) * 1024)
                for n in range(start, start + count)
            )
            store.put_messages(RecordBatch(records, count, "Bench", 0))
        store.wait_dispatched()

        def read() -> GetResult:
            return store.get_messages("Bench", 0, 0, args.batch, max_bytes=64 << 20, raw=True)

        data = b"".join(read().raw)
        if len(decode_pulled(data)) != args.batch:
            raise SystemExit(
                f"the store read {len(decode_pulled(data))} messages, not {args.batch}"
            )
        print(f"{args.batch:,} x 1 KiB messages a read, best of {ROUNDS} x {args.reads:,}:")
        for name, step in (
            ("store read", read),
            ("decode, record by record", lambda: decode_records(data)),
            ("decode, in bulk", lambda: decode_pulled(data)),
        ):
            print(f"  {name:<26} {_best_us(step, args.reads) / args.batch:6.3f} us a message")
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _best_us(step: Callable[[], object], reads: int) -> float:
    """The fastest of ROUNDS rounds of ``reads`` calls, in microseconds a call."""
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(reads):
            step()
        best = min(best, (time.perf_counter() - started) / reads)
    return best * 1e6


if __name__ == "__main__":
    main()
