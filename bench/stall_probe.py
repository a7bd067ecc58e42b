"""Print every 256-message put_messages batch slower than 5 ms, with when it happened.

Run: .venv/bin/python -m bench.stall_probe
On the Firecracker VM of bench/RESULTS.md it shows ~20 ms pauses about every 45 ms.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from services.store import MessageStore, StoreConfig, StoreMessage

BATCH = 256
COUNT = 200_000
SLOW_S = 0.005


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="boltmq-stall-"))
    store = MessageStore(StoreConfig(root_dir=root))
    store.start()
    try:
        store.put_message(StoreMessage(topic="WarmUp", body=b"", queue_id=0))
        messages = [
            StoreMessage(topic="Probe", body=b"x" * 1024, queue_id=i % 16) for i in range(COUNT)
        ]
        slow = []
        start = time.perf_counter()
        for i in range(0, COUNT, BATCH):
            t0 = time.perf_counter()
            store.put_messages(messages[i : i + BATCH])
            took = time.perf_counter() - t0
            if took > SLOW_S:
                slow.append(f"{t0 - start:.3f}s:{took * 1000:.1f}ms")
        seconds = time.perf_counter() - start
        print(
            f"{COUNT / seconds:,.0f} msg/s; batches over {SLOW_S * 1000:.0f} ms: "
            f"{len(slow)}: {' '.join(slow)}"
        )
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
