"""QueueRuns: one Append carrying raw records of several queues, appended in one engine call.

A broker's request of many topics (its sections) holds a few records for each
of many queues. Sent as one Append each, every queue cost the broker and the
store a request, an answer and their checks. An Append of ``runs`` carries them
all in one request (``AppendRequest.runs`` in protos/boltmq/v1/store.proto):

- ``records`` holds each run's records back to back, run after run;
  ``record_count`` is the runs' total; ``topic`` and ``queue_id`` stay empty;
- the request is refused INVALID_ARGUMENT, naming the field, and nothing is
  stored, when it carries ``messages`` or a ``topic``/``queue_id`` of its own,
  more than :data:`RUNS_MAX` runs, a run of no records, or counts that do not
  add up to ``record_count``;
- records that cannot be told apart (their sizes do not tile ``records``) are
  all refused MESSAGE_ILLEGAL, as a raw Append's are;
- otherwise each run is appended as a batch of its own
  (:meth:`~services.store.store.MessageStore.put_record_batches`: the engine's
  checks and outcome per record, queue offsets per queue in run order), all in
  one engine call, and the answer is one AppendResponse with an entry per record
  in order (``errors`` by index over all the records). A run whose topic or
  queue no Append could name has its records refused MESSAGE_ILLEGAL, saying
  why; the other runs are stored;
- a store that waits for its flush or its replicas waits once, for the last
  record (:meth:`~services.store.store.MessageStore.put_record_batches_async`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from boltmq.kernel import telemetry
from boltmq.v1 import store_pb2
from boltmq.wire.record_batch import MalformedBatch, RecordBatch, frame_records
from services.store.errors import BadRequest
from services.store.proto_conversion import parts_response
from services.store.request_checks import APPEND_MESSAGES_MAX
from services.store.status import PutResult, PutStatus
from services.store.store import MessageStore

RUNS_MAX: Final = 1024
"""Runs one Append may carry (a broker's request has at most 1,024 sections)."""


def check_runs(request: store_pb2.AppendRequest, records: bytes) -> None:
    """BadRequest naming the field when an Append of runs is malformed (module docstring)."""
    if request.messages:
        raise BadRequest("messages", "an Append of runs carries records, not messages")
    if request.topic:
        raise BadRequest("topic", "an Append of runs names the topic in each run")
    if request.queue_id:
        raise BadRequest("queue_id", "an Append of runs names the queue in each run")
    runs = request.runs
    if len(runs) > RUNS_MAX:
        raise BadRequest("runs", f"{len(runs)} runs, at most {RUNS_MAX} per call")
    count = request.record_count
    if not 0 < count <= APPEND_MESSAGES_MAX:
        raise BadRequest("record_count", f"{count} records; 1..{APPEND_MESSAGES_MAX} per call")
    if not records:
        raise BadRequest("records", f"empty, but record_count is {count}")
    total = 0
    for index, run in enumerate(runs):
        if run.record_count <= 0:
            raise BadRequest(f"runs[{index}].record_count", f"{run.record_count}; at least 1")
        total += run.record_count
    if total != count:
        raise BadRequest("record_count", f"{count}, but the runs hold {total} records")


def run_batches(
    records: bytes, runs: Sequence[store_pb2.QueueRun]
) -> list[RecordBatch] | MalformedBatch:
    """Each run's records as a batch of its own; the MalformedBatch when the records
    cannot be told apart (runs already checked: :func:`check_runs`)."""
    try:
        positions = frame_records(records, sum(run.record_count for run in runs))
    except MalformedBatch as exc:
        return exc
    positions.append(len(records))
    batches = []
    first = 0
    for run in runs:
        last = first + run.record_count
        start, end = positions[first], positions[last]
        part = records if start == 0 and end == len(records) else records[start:end]
        batches.append(RecordBatch(part, run.record_count, run.topic, run.queue_id))
        first = last
    return batches


async def append_runs(
    store: MessageStore,
    request: store_pb2.AppendRequest,
    records: bytes,
    born: tuple[str, int],
) -> store_pb2.AppendResponse:
    """Every run of a checked Append of runs (:func:`check_runs`) appended in one engine
    call; the answer, an entry per record in order (module docstring)."""
    runs = request.runs
    batches = run_batches(records, runs)
    results: Sequence[Sequence[PutResult]]
    if isinstance(batches, MalformedBatch):
        error = str(batches)
        count = request.record_count
        results = [[PutResult(PutStatus.MESSAGE_ILLEGAL, error=error) for _ in range(count)]]
    elif store.needs_async_wait:
        results = await store.put_record_batches_async(batches, [born] * len(batches))
    else:
        results = store.put_record_batches(batches, [born] * len(batches))
    telemetry.annotate(runs[0].topic, runs[0].queue_id, request.record_count, len(records))
    return parts_response(results, store.commitlog.msg_id_prefix)
