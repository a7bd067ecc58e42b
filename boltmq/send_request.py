"""The SendRequest of a natural batch, and each send's share of its answer.

A natural batch (:mod:`boltmq.send_batcher`) holds the parts of concurrent sends to one
broker, in arrival order; a part is one send's records (CommitLog records back to back,
all of one topic), their count, the topic and the queue its send picked.

- Parts of one topic go as one raw SendRequest: their records joined, to the queue of
  the first part (an unsharded send takes any queue of the broker; a sharded send's key
  holds only sends of its own queue). The results are split back by count, each with
  its part's unique id; an answer of another count fails the parts (INTERNAL).
- Parts of several topics (only to a broker that takes ``sections``; the send stream
  says so, :attr:`boltmq.send_stream.SendStream.takes_sections`) go as one SendRequest
  of ``sections``: a section per topic, in the order the topics first appear, holding the
  records of that topic's parts joined, to the queue of its first part. Each section's
  answer is split back the same way; a section answered with a code gives each of its
  sends the :class:`~boltmq.send_stream.StreamSendError` its own call would have raised.
- A request of several topics refused as a whole with a code a retry cannot cure (an
  access rule on one of its topics, a broker that does not take sections after all)
  raises :class:`SectionsRefused`: each of its sends then goes again alone, so one
  topic's refusal never fails another topic's send.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

import grpc

from boltmq.client import is_retryable
from boltmq.message import SendResult, send_results
from boltmq.send_batcher import MIN_TIMEOUT_S, Call, SendBatcher
from boltmq.send_stream import StreamSendError
from boltmq.v1 import broker_pb2

SECTIONS_MAX = 1024
"""Sections a request carries at most (the broker refuses more)."""
_CODES = {code.value[0]: code for code in grpc.StatusCode}

Outcome = Sequence[SendResult] | BaseException
"""A part's results (one per message) or what its send raises."""


class SendPart(NamedTuple):
    """One send's share of a natural batch."""

    topic: str
    queue_id: int
    records: bytes
    record_count: int
    unique_ids: Sequence[str] = ()
    """Each record's ``UNIQ_KEY`` (the broker's answers carry none), put in its result."""


class SectionsRefused(Exception):
    """A request of several topics was refused whole: each send goes again alone."""


def _layout(parts: Sequence[SendPart]) -> list[list[int]]:
    """The parts' indexes grouped by topic, in the order the topics first appear."""
    by_topic: dict[str, list[int]] = {}
    for index, part in enumerate(parts):
        by_topic.setdefault(part.topic, []).append(index)
    return list(by_topic.values())


def batch_request(
    group: str, default_queue_nums: int, parts: Sequence[SendPart]
) -> tuple[broker_pb2.SendRequest, list[list[int]]]:
    """The request carrying ``parts`` and its layout: the parts of each section (one
    entry, every part, for a request of one topic). At most :data:`SECTIONS_MAX` topics."""
    layout = [[0]] if len(parts) == 1 else _layout(parts)
    if len(layout) > SECTIONS_MAX:
        raise ValueError(f"{len(layout)} topics in one request; at most {SECTIONS_MAX}")
    if len(layout) == 1:
        first = parts[0]
        if len(parts) == 1:
            records, count = first.records, first.record_count
        else:
            records = b"".join(p.records for p in parts)
            count = sum(p.record_count for p in parts)
        request = broker_pb2.SendRequest(
            producer_group=group,
            records=records,
            record_count=count,
            topic=first.topic,
            queue_id=first.queue_id,
            default_topic_queue_nums=default_queue_nums,
        )
        return request, layout
    sections = [
        broker_pb2.SendSection(
            topic=parts[indexes[0]].topic,
            queue_id=parts[indexes[0]].queue_id,
            records=b"".join(parts[i].records for i in indexes),
            record_count=sum(parts[i].record_count for i in indexes),
        )
        for indexes in layout
    ]
    request = broker_pb2.SendRequest(
        producer_group=group, default_topic_queue_nums=default_queue_nums, sections=sections
    )
    return request, layout


def part_outcomes(
    response: broker_pb2.SendResponse, parts: Sequence[SendPart], layout: list[list[int]]
) -> list[Outcome]:
    """Each part's outcome from the answer to :func:`batch_request`'s request. An answer
    whose shape does not match the request gives the parts it cannot place a
    StreamSendError (INTERNAL) naming what is wrong."""
    if len(layout) == 1:  # its one section holds every part: _split places each
        placed: list[Outcome] = [()] * len(parts)
        _split(response, parts, layout[0], placed)
        return placed
    outcomes: list[Outcome] = [
        StreamSendError(grpc.StatusCode.INTERNAL, "the broker's answer left this send out")
    ] * len(parts)
    if len(response.sections) != len(layout):
        wrong = StreamSendError(
            grpc.StatusCode.INTERNAL,
            f"the broker answered {len(response.sections)} sections for {len(layout)}",
        )
        return [wrong] * len(parts)
    for indexes, answer in zip(layout, response.sections, strict=True):
        if answer.code:
            code = _CODES.get(answer.code, grpc.StatusCode.UNKNOWN)
            for index in indexes:
                outcomes[index] = StreamSendError(code, answer.error)
        else:
            _split(answer.response, parts, indexes, outcomes)
    return outcomes


def _split(
    response: broker_pb2.SendResponse,
    parts: Sequence[SendPart],
    indexes: list[int],
    outcomes: list[Outcome],
) -> None:
    """Give each part of ``indexes`` its slice of the answer's results, each with its
    unique id; an answer of another count of results fails them all (INTERNAL)."""
    if len(indexes) == 1:
        part = parts[indexes[0]]
        expected, ids = part.record_count, part.unique_ids
    else:
        expected = sum(parts[index].record_count for index in indexes)
        ids = [unique_id for index in indexes for unique_id in parts[index].unique_ids]
    if len(response.statuses) != expected:
        wrong = StreamSendError(
            grpc.StatusCode.INTERNAL,
            f"the broker answered {len(response.statuses)} results for {expected} messages",
        )
        for index in indexes:
            outcomes[index] = wrong
        return
    results = send_results(response, ids if len(ids) == expected else None)
    if len(indexes) == 1:
        outcomes[indexes[0]] = results
        return
    start = 0
    for index in indexes:
        count = parts[index].record_count
        outcomes[index] = results[start : start + count]
        start += count


def send_parts(
    call: Callable[[bytes, float], broker_pb2.SendResponse],
    group: str,
    default_queue_nums: int,
    parts: Sequence[SendPart],
    timeout_s: float,
) -> list[Outcome]:
    """Send ``parts`` as one request through ``call(serialized request, timeout_s)``;
    each part's outcome. Raises what the call raised, or SectionsRefused when a request of
    several topics was refused whole with a code a retry cannot cure."""
    request, layout = batch_request(group, default_queue_nums, parts)
    try:
        response = call(request.SerializeToString(), timeout_s)
    except grpc.RpcError as exc:
        if len(layout) > 1 and not is_retryable(exc):
            raise SectionsRefused(str(exc)) from exc
        raise
    return part_outcomes(response, parts, layout)


def send_batched(
    batcher: SendBatcher[SendPart, SendResult],
    key: Hashable,
    part: SendPart,
    deadline: float,
    call: Call[SendPart, SendResult],
    lanes: int = 1,
) -> list[SendResult]:
    """``part``'s results, sent in ``key``'s natural batch (``lanes`` calls of it in flight
    at most); sent again alone when its request of several topics was refused whole
    (:class:`SectionsRefused`)."""
    size = len(part.records)
    try:
        return list(batcher.send(key, part, part.record_count, size, deadline, call, lanes))
    except SectionsRefused:
        left = max(deadline - time.monotonic(), MIN_TIMEOUT_S)
        return outcome_results(call([part], left)[0])


def outcome_results(outcome: Outcome) -> list[SendResult]:
    """A part's results; raises what its send is to raise."""
    if isinstance(outcome, BaseException):
        raise outcome
    return list(outcome)
