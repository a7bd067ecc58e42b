"""The sections of a send: one SendRequest carrying several topics' raw batches.

Format (``SendRequest.sections`` in protos/boltmq/v1/broker.proto): each
:class:`SendSection` is the batch fields of a raw SendRequest (``topic``,
``queue_id`` with -1 for "the broker picks", ``records``, ``record_count``); the
request's own ``producer_group`` and ``default_topic_queue_nums`` apply to every
section. The answer is ``SendResponse(sections=[SectionAnswer, ...])``, one per
section in section order, its other fields empty. A ``SectionAnswer`` holds
either the section's ``response`` (code 0: what a raw SendRequest of that
section alone would have been answered; records refused one by one keep their
own status and error inside it), or the gRPC status ``code``
(``grpc.StatusCode.X.value[0]``) and ``error`` text that request would have
failed with.

Rules:

- the whole request is refused INVALID_ARGUMENT, naming the field, and nothing
  is stored, when it carries anything of a batch beside its sections
  (``messages``, ``records``, ``record_count``, ``topic``, or a non-zero
  ``queue_id``), more than :data:`MAX_SECTIONS` sections, a bad
  ``producer_group`` or a negative ``default_topic_queue_nums``; or when its
  sections name more topics the broker does not have than one call may
  auto-create (``auto_create_max_per_call``, while auto-creation is on): each
  creation is still charged one by one as its section runs, against the
  client's total and rate;
- each section is then handled as a raw SendRequest of its own
  (:func:`section_request`) would be: the same checks, auto-creation, queue
  choice, delay rewrite, refusal of transaction bits, metrics and span
  attributes. The sections of existing topics without a delay are checked in
  one pass (:func:`services.broker.send.checked_batch.checked_batches`) and their
  batches go to the store together, as one Append of runs (the store appends
  them in one call: services/store/queue_runs.py; a request of more records than
  one Append takes, 16,384, in as few as it takes, one after another); the others
  (a topic to auto-create, a delay, records that cannot be framed) run at once
  through the broker's raw send path, each on its own. While tracing is on,
  every section takes that path, in a ``send section`` span of its own, the
  child of the call's. A section
  refused as a whole (its topic a system, retry or dead-letter topic, unknown
  or not writable, its request fields wrong) is answered with its own code
  and the others go on and are stored; an unexpected failure answers INTERNAL
  for that section and is logged;
- access control checks PUB on every section's topic before any section runs
  (:mod:`services.broker.access.resources`): one topic the account may not
  publish to refuses the whole request, unary or streamed;
- a request of sections is one call (or one stream message) for the client's
  rate and in-flight budget, whatever its sections, as a raw batch of many
  records is; its size is bounded by the server's message size cap and
  :data:`MAX_SECTIONS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc
from opentelemetry.trace import SpanKind

from boltmq.kernel import telemetry
from boltmq.kernel.errors import CALLER_MISTAKES, ServiceError
from boltmq.v1 import broker_pb2
from boltmq.wire.topic import DLQ_PREFIX, RETRY_PREFIX
from services.broker.access.creation_limits import CreationLimits
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument
from services.broker.metadata.topic_config import BROKER_TOPICS, TopicConfigManager
from services.broker.send.batch_check import check_producer

log = logging.getLogger(__name__)

MAX_SECTIONS = 1024
"""Sections one SendRequest may carry."""
SECTION_SPAN = "send section"
"""The name of each section's span."""
SendRaw = Callable[[broker_pb2.SendRequest, str], Awaitable[broker_pb2.SendResponse]]
"""The broker's raw send path: a raw SendRequest and the peer's address -> its response."""


def check_sections(request: broker_pb2.SendRequest) -> None:
    """Raise InvalidArgument naming the field when a request of sections is malformed as a
    whole (module docstring); the sections themselves are checked as they run."""
    count = len(request.sections)
    if count > MAX_SECTIONS:
        raise InvalidArgument(f"sections: {count} sections in one request, at most {MAX_SECTIONS}")
    if request.messages:
        raise InvalidArgument("messages: a request of sections carries its records in sections")
    if request.records:
        raise InvalidArgument("records: a request of sections carries its records in sections")
    if request.record_count:
        raise InvalidArgument("record_count: a request of sections sets it in each section")
    if request.topic:
        raise InvalidArgument("topic: a request of sections names the topic in each section")
    if request.queue_id:
        raise InvalidArgument("queue_id: a request of sections sets it in each section")
    check_producer(request)


def check_creations(
    request: broker_pb2.SendRequest,
    config: BrokerConfig,
    topics: TopicConfigManager,
    creations: CreationLimits,
) -> None:
    """Refuse, before any section runs, sections naming more unknown topics than one call
    may auto-create (only topics a section could create count: not the broker's own, nor
    retry or dead-letter topics)."""
    if not config.auto_create_topic_enable or not creations.per_call:
        return
    unknown = {
        section.topic
        for section in request.sections
        if section.topic not in BROKER_TOPICS
        and not section.topic.startswith((RETRY_PREFIX, DLQ_PREFIX))
        and topics.get(section.topic) is None
    }
    creations.check_per_call(len(unknown), "sections")


def section_request(
    request: broker_pb2.SendRequest,
    section: broker_pb2.SendSection,
    records: bytes | None = None,
) -> broker_pb2.SendRequest:
    """The raw SendRequest a section stands for (the request's producer fields, the
    section's batch; ``records``: the section's, already taken out of it)."""
    return broker_pb2.SendRequest(
        producer_group=request.producer_group,
        default_topic_queue_nums=request.default_topic_queue_nums,
        topic=section.topic,
        queue_id=section.queue_id,
        records=section.records if records is None else records,
        record_count=section.record_count,
    )


async def send_sections_alone(
    request: broker_pb2.SendRequest, indexes: list[int], peer_address: str, send_raw: SendRaw
) -> list[broker_pb2.SectionAnswer]:
    """The answers of the sections at ``indexes``, each run at once as a raw request of
    its own through ``send_raw``."""
    if not indexes:
        return []
    return list(
        await asyncio.gather(
            *(
                _answer(i, section_request(request, request.sections[i]), peer_address, send_raw)
                for i in indexes
            )
        )
    )


async def send_sections(
    request: broker_pb2.SendRequest, peer_address: str, send_raw: SendRaw
) -> broker_pb2.SendResponse:
    """Run every section of a checked request at once through ``send_raw``; their answers
    in section order."""
    every = list(range(len(request.sections)))
    answers = await send_sections_alone(request, every, peer_address, send_raw)
    return broker_pb2.SendResponse(sections=answers)


def _section_span() -> contextlib.AbstractContextManager[object]:
    """A ``send section`` span, the child of the call's, current inside the block (the raw
    path describes its batch on the current span); nothing when tracing is off."""
    if not telemetry.tracing_on():
        return contextlib.nullcontext()
    return telemetry.tracer().start_as_current_span(SECTION_SPAN, kind=SpanKind.INTERNAL)


async def _answer(
    index: int, request: broker_pb2.SendRequest, peer_address: str, send_raw: SendRaw
) -> broker_pb2.SectionAnswer:
    """One section's answer: its response, or the status its send failed with."""
    try:
        with _section_span():
            response = await send_raw(request, peer_address)
        return broker_pb2.SectionAnswer(response=response)
    except Exception as exc:  # a bug, when not a ServiceError: that section fails alone
        return section_failure(index, request.topic, exc)


def section_failure(index: int, topic: str, exc: Exception) -> broker_pb2.SectionAnswer:
    """The answer of a section whose send failed: the ServiceError's code and text, or
    INTERNAL for anything else (a bug, logged); the other sections go on."""
    if isinstance(exc, ServiceError):
        if exc.code not in CALLER_MISTAKES:
            log.warning("section %d (topic %.60r) of a send failed: %s", index, topic, exc)
        return broker_pb2.SectionAnswer(code=exc.code.value[0], error=str(exc))
    log.error("section %d (topic %.60r) of a send failed", index, topic, exc_info=exc)
    return broker_pb2.SectionAnswer(
        code=grpc.StatusCode.INTERNAL.value[0], error=f"{type(exc).__name__}: {exc}"
    )
