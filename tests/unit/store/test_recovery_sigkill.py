"""Recovery (docs/store-format.md) after a real ``kill -9``: no acknowledged message is lost.

A writer process puts messages and prints each acknowledgement; it is
SIGKILLed mid-stream, and the reopened store must serve every acknowledged
message exactly once and in order in its queue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.conftest import read_queue
from tests.unit.store.recovery_helpers import SEGMENT_BYTES, open_store

REPO_ROOT = Path(__file__).resolve().parents[3]
KILL_ACKS_WANTED = 400
KILL_TIMEOUT_S = 60


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from services.store import StoreMessage, MessageStore, PutStatus, StoreConfig

    store = MessageStore(StoreConfig(
        root_dir=Path(sys.argv[1]), mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1000, max_index_num=4000,
        disk_max_used_space_ratio=100, disk_space_clean_forcibly_ratio=100,
        disk_space_warning_level_ratio=100))  # the machine's disk must not clean this store
    store.start()
    for i in range(1_000_000):
        body = (f"kill-{i}|" * 40).encode()
        result = store.put_message(StoreMessage(topic="Kill", queue_id=i % 2, body=body,
                                           keys=[f"k{i}"]))
        if result.status != PutStatus.PUT_OK:
            sys.exit(f"put {i}: {result}")
        sys.stdout.write(f"{i} {result.commitlog_offset} {result.queue_offset}\\n")
        sys.stdout.flush()
""")


def kill_body(i: int) -> bytes:
    return (f"kill-{i}|" * 40).encode()


def test_sigkilled_writer_loses_no_acknowledged_message(tmp_path: Path) -> None:
    root = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + KILL_TIMEOUT_S
    try:
        assert child.stdout is not None
        while len(acked) < KILL_ACKS_WANTED and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acked.append(tuple(map(int, line.split())))  # type: ignore[arg-type]
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=KILL_TIMEOUT_S)
        # Read through the same buffered file: communicate() would skip what it buffered.
        rest = child.stdout.read()
        err = child.stderr.read() if child.stderr is not None else ""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert len(acked) >= KILL_ACKS_WANTED, err
    assert child.returncode == -signal.SIGKILL
    # Lines printed before the kill are acknowledgements too; a torn last line is not.
    for line in rest.splitlines(keepends=True):
        if line.endswith("\n"):
            acked.append(tuple(map(int, line.split())))  # type: ignore[arg-type]
    assert (root / "abort").exists()
    assert acked[-1][1] > SEGMENT_BYTES  # the writer crossed a segment boundary

    store = open_store(root)
    try:
        assert store.recovery is not None and store.recovery.clean is False
        for i, offset, _queue_offset in acked:
            record = store.look_message(offset)
            assert record is not None and bytes(record.body) == kill_body(i)
        for queue_id in range(2):
            served = read_queue(store, "Kill", queue_id)
            bodies = [body for _, _, body in served]
            # Exactly once and in order: queue q holds i = q, q+2, q+4... with no gap.
            expected = [kill_body(i) for i in range(queue_id, 2 * len(bodies), 2)]
            assert bodies == expected
            mine = [(q, o) for i, o, q in acked if i % 2 == queue_id]
            assert [(q, o) for q, o, _ in served[: len(mine)]] == mine
        assert store.verify() == []
    finally:
        store.shutdown()
