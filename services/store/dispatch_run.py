"""DispatchRun: the dispatch requests of one bulk append, as columns.

The bulk append (:func:`services.store.record_copy.stamp_bulk`,
for a batch whose records are all good, all consumable and all fit in the
current segment) puts every record of a batch into one queue at consecutive
queue offsets. Its dispatch requests are kept as columns, so the dispatcher
writes the consume-queue entries with one copy
(:meth:`services.store.consume_queue.ConsumeQueue.put_run`) instead of one put
per record. Anything else that reads an append's requests sees a sequence of
``DispatchTuple`` (made the first time it is iterated or indexed).

Several appends made under one lock hold (``CommitLog.append_record_batches``)
hand their requests over together, in CommitLog order: one list when every batch
was copied record by record (the one-record batches of a request of many topics:
the dispatcher walks one list, not a part a batch), else one :class:`DispatchParts`
of those lists and each bulk append's DispatchRun (which stays columns).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from boltmq.wire.column_rows import ColumnRows

DispatchTuple = tuple[str, int, int, int, int, int, int, tuple[str, ...], int]
"""The fields of :class:`services.store.commitlog.DispatchRequest` as a plain tuple: what
every append hands the dispatcher (cheaper to build per record than the NamedTuple)."""


class DispatchRun(ColumnRows[DispatchTuple]):
    """Records ``first_queue_offset ..`` of (``topic``, ``queue_id``), all consumable."""

    __slots__ = (
        "topic",
        "queue_id",
        "first_queue_offset",
        "commitlog_offsets",
        "sizes",
        "tags_codes",
        "index_keys",
        "sys_flags",
        "store_timestamp",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        commitlog_offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        tags_codes: list[int],
        index_keys: Sequence[tuple[str, ...]],
        sys_flags: npt.NDArray[np.int32],
        store_timestamp: int,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.queue_id = queue_id
        self.first_queue_offset = first_queue_offset
        self.commitlog_offsets = commitlog_offsets
        self.sizes = sizes
        self.tags_codes = tags_codes
        self.index_keys = index_keys
        self.sys_flags = sys_flags
        self.store_timestamp = store_timestamp

    def _rows(self) -> list[DispatchTuple]:
        topic, queue_id, now_ms = self.topic, self.queue_id, self.store_timestamp
        first = self.first_queue_offset
        return [
            (topic, queue_id, physical, size, code, now_ms, first + at, keys, sys_flag)
            for at, (physical, size, code, keys, sys_flag) in enumerate(
                zip(
                    self.commitlog_offsets.tolist(),
                    self.sizes.tolist(),
                    self.tags_codes,
                    self.index_keys,
                    self.sys_flags.tolist(),
                    strict=True,
                )
            )
        ]

    def __len__(self) -> int:
        return len(self.commitlog_offsets)


class DispatchParts(ColumnRows[DispatchTuple]):
    """The requests of several appends made under one lock, in CommitLog order."""

    __slots__ = ("parts", "_count")

    def __init__(self, parts: list[Sequence[DispatchTuple]]) -> None:
        super().__init__()
        self.parts = parts
        self._count = sum(len(part) for part in parts)

    def _rows(self) -> list[DispatchTuple]:
        return [row for part in self.parts for row in part]

    def __len__(self) -> int:
        return self._count
