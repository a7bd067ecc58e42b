"""LocalFileOffsetStore: a BROADCASTING consumer's offsets in a local file, kept across restarts.

In BROADCASTING every member reads every queue, so the broker keeps no offsets for
them (RocketMQ's ``LocalFileOffsetStore``). A :class:`boltmq.PushConsumer` of that
model keeps its own in ``<directory>/<instance_name>/<group>/offsets.json``:
``directory`` is :attr:`PushConsumerOptions.offset_store_dir` (``~/.boltmq/offsets``
by default) and ``instance_name`` :attr:`PushConsumerOptions.instance_name`
(``DEFAULT``; RocketMQ's ``instanceName``, the stable part of its client id: two
members of one group on one machine need different ones). A restarted member reads
the file and continues where it stopped; a queue missing from it starts at
``consume_from``.

The file (JSON, UTF-8)::

    {"version": 1, "group": "cg", "instance_name": "DEFAULT", "updated_ms": 1767225600000,
     "offsets": [{"topic": "Orders", "broker_name": "broker-a", "queue_id": 0,
                  "offset": 42}, ...]}

``offset`` is the next message to consume. The consumer writes it every
``commit_interval_ms`` when something changed and at shutdown, atomically: a
temporary file in the same directory, flushed to disk, then renamed over
``offsets.json`` (a crash leaves the old file or the new one, never half of one).
Entries of queues the consumer no longer reads are kept. A file that cannot be read
or parsed is logged and ignored (every queue starts at ``consume_from``); the
next write replaces it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from boltmq.message import MessageQueue

log = logging.getLogger(__name__)

DEFAULT_DIRECTORY = "~/.boltmq/offsets"
FILE_NAME = "offsets.json"
VERSION = 1


def offsets_path(directory: str, instance_name: str, group: str) -> Path:
    """``<directory>/<instance_name>/<group>/offsets.json`` (``~`` expanded)."""
    return Path(directory or DEFAULT_DIRECTORY).expanduser() / instance_name / group / FILE_NAME


class LocalFileOffsetStore:
    """The offsets of one group of one consumer instance, in one JSON file."""

    def __init__(self, path: Path, group: str, instance_name: str) -> None:
        self.path = path
        self._group = group
        self._instance_name = instance_name
        self._lock = threading.Lock()
        self._offsets: dict[MessageQueue, int] = {}

    def load(self) -> dict[MessageQueue, int]:
        """The offsets in the file (empty when there is none, or it is unreadable)."""
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            offsets = {
                MessageQueue(str(e["topic"]), str(e["broker_name"]), int(e["queue_id"])): int(
                    e["offset"]
                )
                for e in document["offsets"]
            }
        except FileNotFoundError:
            offsets = {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "offsets file %s ignored (queues start at consume_from): %s", self.path, exc
            )
            offsets = {}
        with self._lock:
            self._offsets = {q: o for q, o in offsets.items() if o >= 0}
            return dict(self._offsets)

    def persist(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Merge ``offsets`` into the file, written atomically (OSError when it cannot be)."""
        with self._lock:
            self._offsets.update(offsets)
            document: dict[str, Any] = {
                "version": VERSION,
                "group": self._group,
                "instance_name": self._instance_name,
                "updated_ms": time.time_ns() // 1_000_000,
                "offsets": [
                    {"topic": q.topic, "broker_name": q.broker_name, "queue_id": q.queue_id,
                     "offset": offset}
                    for q, offset in sorted(self._offsets.items())
                ],
            }  # fmt: skip
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".offsets-", dir=self.path.parent)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    json.dump(document, out, indent=1)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
