"""MessageQueue: a value object whose hash is computed once, and stays right across processes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

from boltmq.cli.dev.launcher import REPO_ROOT
from boltmq.message import MessageQueue

LOOKUP = """
import pickle, sys
from boltmq.message import MessageQueue
queue = pickle.loads(sys.stdin.buffer.read())
print({MessageQueue("orders", "broker-a", 1): "found"}.get(queue, "missing"), queue)
"""


def test_equal_queues_are_one_key_and_order_by_their_fields() -> None:
    first, same = MessageQueue("orders", "broker-a", 1), MessageQueue("orders", "broker-a", 1)
    assert first == same and hash(first) == hash(same) and {first: 1}[same] == 1
    assert first != MessageQueue("orders", "broker-a", 2) != MessageQueue("orders", "b", 2)
    assert sorted(
        [MessageQueue("orders", "broker-a", 2), first, MessageQueue("audit", "broker-b", 0)]
    ) == [MessageQueue("audit", "broker-b", 0), first, MessageQueue("orders", "broker-a", 2)]
    assert repr(first) == "MessageQueue(topic='orders', broker_name='broker-a', queue_id=1)"


def test_a_queue_pickled_into_another_process_is_found_there() -> None:
    """A string's hash differs between processes: the cached hash must not travel."""
    for seed in ("1", "2"):
        found = subprocess.run(
            [sys.executable, "-c", LOOKUP],
            input=pickle.dumps(MessageQueue("orders", "broker-a", 1)),
            capture_output=True,
            check=True,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)},
        )
        assert found.stdout.decode().split() == ["found", "orders@broker-a/1"]
