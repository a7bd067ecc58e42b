"""RecordAppends: the store's appends of client-encoded records (RecordBatch).

A producer may send its records already encoded (:mod:`boltmq.wire.record_batch`);
the store verifies them (:meth:`CommitLog.check_records`) and copies them in
(:mod:`services.store.record_copy`). Two ways in, both called by
:class:`~services.store.store.MessageStore` once it has checked that it takes
writes at all (its refusal applies to every record alike):

- :func:`append_records`: one batch (``put_messages`` of a RecordBatch);
- :func:`append_record_batches`: several batches of any topics and queues in
  one engine call (``put_record_batches``: the appends one AppendStream message
  carries). Each batch is checked on its own, then every batch with records
  left is appended under one hold of the CommitLog's lock with one dispatch
  hand-off (:meth:`CommitLog.append_record_batches`). Each batch's results are
  exactly what its own append would give: the same refusals per record, queue
  offsets per (topic, queue) in batch order, the same CommitLog bytes (but for
  the store timestamp, one for the whole call).

Hosts that need the 20-byte IPv6 form do not fit the records' 8-byte
placeholders: such a batch is decoded and appended through the per-message
path instead (after the batches before it, so the order stays the batches').
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from boltmq.wire.record import InvalidMessage
from boltmq.wire.record_batch import RAW_BORN_HOST_DEFAULT, RecordBatch, decode_batch
from services.store.commitlog import CommitLog
from services.store.message import MessageLike
from services.store.record_copy import RecordsAppend
from services.store.status import PutResult, PutStatus

Merge = Callable[[Sequence[PutResult]], Sequence[PutResult]]
"""Merges the results of records refused before the append into those of the stored ones."""
Appended = tuple[Sequence[PutResult], int, Merge]
"""What an append gives: results, the end offset (0: nothing written) and its Merge."""
AppendMessages = Callable[[Sequence[MessageLike], "tuple[str, int] | None"], Appended]
"""The store's per-message append (``MessageStore._append``)."""


def same(results: Sequence[PutResult]) -> Sequence[PutResult]:
    """The Merge of an append that refused nothing before it appended."""
    return results


def append_records(
    commitlog: CommitLog,
    batch: RecordBatch,
    born: tuple[str, int] | None,
    born_host: bytes | None,
    now_ms: int,
    append_messages: AppendMessages,
) -> Appended:
    """One batch: verify every record, then copy and patch (IPv6 hosts: per message)."""
    checked, rejected = commitlog.check_records(batch)
    if not checked:
        return [rejected[i] for i in range(batch.count)], 0, same
    born_host = born_host or RAW_BORN_HOST_DEFAULT
    if len(born_host) == 8 and len(commitlog.store_host) == 8:
        results, appended = commitlog.append_records(
            batch.records, checked, batch.topic, batch.queue_id, born_host, now_ms
        )
        end_offset = appended.end_offset
        inner_merge: Merge = same
    else:
        results, end_offset, inner_merge = append_messages(decode_batch(batch, checked), born)
    if not rejected:
        return results, end_offset, inner_merge

    def merge(stored_results: Sequence[PutResult]) -> Sequence[PutResult]:
        return _with_rejected(inner_merge(stored_results), rejected, batch.count)

    return results, end_offset, merge


def append_record_batches(
    commitlog: CommitLog,
    batches: Sequence[RecordBatch],
    borns: Sequence[tuple[str, int] | None],
    append_messages: AppendMessages,
) -> list[Sequence[PutResult]]:
    """Several batches in one engine call (see the module docstring); one result list
    per batch, in order."""
    now_ms = time.time_ns() // 1_000_000
    out: list[Sequence[PutResult]] = [()] * len(batches)
    waiting: list[tuple[int, dict[int, PutResult], int]] = []  # (index, rejected, count)
    appends: list[RecordsAppend] = []

    def append_waiting() -> None:
        if not appends:
            return
        results, _ = commitlog.append_record_batches(appends, now_ms)
        for (index, rejected, count), stored in zip(waiting, results, strict=True):
            out[index] = _with_rejected(stored, rejected, count) if rejected else stored
        appends.clear()
        waiting.clear()

    store_v4 = len(commitlog.store_host) == 8
    last_born: tuple[str, int] | None = None
    born_host = RAW_BORN_HOST_DEFAULT
    for index, (batch, born) in enumerate(zip(batches, borns, strict=True)):
        if born is None or born is not last_born:  # an Append of runs: one born for all
            try:
                encoded = commitlog.encode_born_host(*born) if born is not None else None
            except (InvalidMessage, ValueError) as exc:
                out[index] = [
                    PutResult(PutStatus.MESSAGE_ILLEGAL, error=str(exc)) for _ in range(batch.count)
                ]
                last_born = None
                continue
            born_host, last_born = encoded or RAW_BORN_HOST_DEFAULT, born
        if len(born_host) == 8 and store_v4:
            checked, rejected = commitlog.check_records(batch)
            if not checked:
                out[index] = [rejected[i] for i in range(batch.count)]
                continue
            appends.append((batch.records, checked, batch.topic, batch.queue_id, born_host))
            waiting.append((index, rejected, batch.count))
            continue
        append_waiting()  # the batches before this one go first
        results, _, merge = append_records(
            commitlog, batch, born, born_host, now_ms, append_messages
        )
        out[index] = merge(results)
    append_waiting()
    return out


def _with_rejected(
    stored: Sequence[PutResult], rejected: dict[int, PutResult], count: int
) -> list[PutResult]:
    """A batch's results in record order: the refused ones' and the stored ones'."""
    results = iter(stored)
    return [rejected[i] if i in rejected else next(results) for i in range(count)]
