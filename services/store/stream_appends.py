"""StreamAppends: the appends one AppendStream message carries.

A broker's append stream joins the appends of concurrent sends into one stream
message (the first, the others in its ``more``; protos/boltmq/v1/store.proto).
A store that answers appends at once takes such a message's appends of raw
records (each of one topic and queue) in one engine call
(:func:`append_together`), each answered with what its own append would give,
and sends the answers back as one message (:func:`one_message`). An append that
came in ``more`` with a ``more`` of its own is refused (:func:`no_inner_more`),
that append alone, with the code a unary Append would end with (:func:`refused`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import grpc

from boltmq.kernel import telemetry
from boltmq.kernel.errors import ServiceError
from boltmq.v1 import store_pb2
from boltmq.wire.record_batch import RecordBatch
from services.store.config import StoreConfig
from services.store.errors import BadRequest
from services.store.metrics import StoreMetrics
from services.store.proto_conversion import append_response
from services.store.request_checks import parse_host_port, peer_host, record_batch
from services.store.store import MessageStore


def append_together(
    store: MessageStore,
    config: StoreConfig,
    metrics: StoreMetrics,
    appends: Sequence[store_pb2.AppendStreamRequest],
    context: grpc.aio.ServicerContext,
) -> list[store_pb2.AppendStreamResponse] | None:
    """A stream message's appends (answered at once) in one engine call when every one
    is of raw records; None when one is not (the caller appends them one by one).

    Each append's fields are checked as the servicer's Append checks them, a refusal
    answered on its own; the valid ones go to ``put_record_batches`` together,
    each answered with what its own append would give.
    """
    if not all(_raw_records(a.append) for a in appends):
        return None
    started = time.perf_counter()
    answers: list[store_pb2.AppendStreamResponse | None] = []
    taken: list[tuple[int, RecordBatch]] = []
    borns: list[tuple[str, int]] = []
    peer: tuple[str, int] | None = None
    max_queue_id = config.max_queue_id
    for n, stream_request in enumerate(appends):
        request = stream_request.append
        try:
            no_inner_more(stream_request, n > 0)
            batch = record_batch(request, request.records, max_queue_id)
            if request.born_host:
                born = parse_host_port("born_host", request.born_host)
            else:
                born = peer = peer or peer_host(context.peer())
        except ServiceError as exc:
            answers.append(refused(stream_request, exc))
            continue
        answers.append(None)
        taken.append((n, batch))
        borns.append(born)
    if taken:
        results = store.put_record_batches([batch for _, batch in taken], borns)
        seconds = time.perf_counter() - started
        prefix = store.commitlog.msg_id_prefix
        metrics.put(sum(len(stored) for stored in results), seconds)  # one call
        for (n, batch), stored in zip(taken, results, strict=True):
            telemetry.annotate(batch.topic, batch.queue_id, len(stored), len(batch.records))
            answers[n] = store_pb2.AppendStreamResponse(
                id=appends[n].id, append=append_response(stored, prefix)
            )
    return [answer for answer in answers if answer is not None]


def _raw_records(append: store_pb2.AppendRequest) -> bool:
    """Whether an append is of one queue's raw records (not messages, not runs)."""
    return bool(append.record_count) and not (append.messages or append.runs)


def no_inner_more(request: store_pb2.AppendStreamRequest, inner: bool) -> None:
    """BadRequest for an append that came in ``more`` (``inner``) with a ``more`` of its own."""
    if inner and request.more:
        raise BadRequest("more", "an append carried in `more` cannot carry more of its own")


def refused(
    request: store_pb2.AppendStreamRequest, exc: ServiceError
) -> store_pb2.AppendStreamResponse:
    """A stream append's answer when it is refused: the code the unary call gets."""
    return store_pb2.AppendStreamResponse(
        id=request.id, error_code=exc.code.value[0], error=str(exc)
    )


def one_message(answers: list[store_pb2.AppendStreamResponse]) -> store_pb2.AppendStreamResponse:
    """Answers going back as one message: the first, the others in its ``more``."""
    answers[0].more.extend(answers[1:])
    return answers[0]
