"""Dead letters: listing ``%DLQ%<group>`` and resending its messages (admin), and burying
a message a group gave up on (:func:`bury`: POP consumption's last step).

The DLQ topic is WRITE only, so no consumer pulls it; these admin calls read
it through the broker's own store connection. Resending appends a copy of a
dead letter to the topic it first failed on (its ``RETRY_TOPIC``), with
``reconsume_times`` back at 0, so the group consumes it again like a new
message. The dead letter itself stays (the CommitLog is append-only); an
operator who resends the same offset twice gets two copies.
"""

from __future__ import annotations

import itertools

import grpc

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.body_compression import BODY_SYS_FLAGS
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument, NotFound, PermissionDenied, StoreFailed
from services.broker.metadata.names import check_group
from services.broker.metadata.topic_config import TopicConfigManager
from services.broker.retry.retry_topic import dlq_topic, ensure_dlq_topic
from services.broker.retry.send_back import (
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    origin_topic,
    retry_copy,
)
from services.broker.store.store_client import StoreClient
from services.broker.wire import STORED, to_send_response

LIST_DEFAULT_MESSAGES = 32
LIST_MAX_MESSAGES = 1024
"""Dead letters one ListDeadLetters returns at most."""
RESEND_MAX_MESSAGES = 1024
"""Dead letters one ResendDeadLetters may name."""
_DROPPED_ON_RESEND = frozenset(
    (PROPERTY_RECONSUME_TIME, PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_RETRY_TOPIC)
)


class DeadLetterProcessor:
    """Serves ListDeadLetters and ResendDeadLetters."""

    def __init__(
        self, config: BrokerConfig, topics: TopicConfigManager, store: StoreClient
    ) -> None:
        self._config = config
        self._topics = topics
        self._store = store
        self._round_robin = itertools.count()

    def _dlq_of(self, group: str) -> str:
        check_group("group", group)
        topic = dlq_topic(group)
        if self._topics.get(topic) is None:
            raise NotFound(f"group: group {group!r} has no dead letters ({topic} does not exist)")
        return topic

    async def list(
        self, request: broker_pb2.ListDeadLettersRequest
    ) -> broker_pb2.ListDeadLettersResponse:
        """Dead letters of a group from a queue offset, oldest first."""
        topic = self._dlq_of(request.group)
        if request.queue_offset < 0:
            raise InvalidArgument("queue_offset: must not be negative")
        if not 0 <= request.max_messages <= LIST_MAX_MESSAGES:
            raise InvalidArgument(f"max_messages: must be 0..{LIST_MAX_MESSAGES}")
        response = await self._store.pull(
            store_pb2.PullRequest(
                topic=topic,
                queue_id=0,
                queue_offset=request.queue_offset,
                max_messages=request.max_messages or LIST_DEFAULT_MESSAGES,
            )
        )
        return broker_pb2.ListDeadLettersResponse(
            messages=response.messages,
            next_offset=response.next_begin_offset,
            max_offset=response.max_offset,
        )

    async def resend(
        self, request: broker_pb2.ResendDeadLettersRequest
    ) -> broker_pb2.ResendDeadLettersResponse:
        """Append a fresh copy of each named dead letter to its original topic."""
        topic = self._dlq_of(request.group)
        if not 0 < len(request.commitlog_offsets) <= RESEND_MAX_MESSAGES:
            raise InvalidArgument(f"commitlog_offsets: name 1..{RESEND_MAX_MESSAGES} dead letters")
        letters = [
            await self._dead_letter(topic, index, offset)
            for index, offset in enumerate(request.commitlog_offsets)
        ]
        results = []
        for letter in letters:
            results.append(await self._resend_one(letter))
        return broker_pb2.ResendDeadLettersResponse(results=results)

    async def _dead_letter(self, topic: str, index: int, offset: int) -> message_pb2.MessageExt:
        field = f"commitlog_offsets[{index}]"
        if offset < 0:
            raise InvalidArgument(f"{field}: must not be negative")
        found = await self._store.get(store_pb2.GetRequest(commitlog_offset=offset))
        if not found.found:
            raise NotFound(f"{field}: no message at {offset}")
        if found.message.topic != topic:
            raise InvalidArgument(
                f"{field}: the message at {offset} is in {found.message.topic!r}, not {topic!r}"
            )
        return found.message

    async def _resend_one(self, letter: message_pb2.MessageExt) -> broker_pb2.SendResponse:
        origin = letter.properties.get(PROPERTY_RETRY_TOPIC, "")
        config = self._topics.get(origin)
        if config is None:
            raise NotFound(
                f"commitlog_offsets: the original topic {origin!r} of "
                f"{letter.msg_id} does not exist any more"
            )
        if not config.writable or config.write_queue_nums <= 0:
            raise PermissionDenied(f"commitlog_offsets: topic {origin!r} is not writable")
        queue_id = next(self._round_robin) % config.write_queue_nums
        copy = message_pb2.Message(
            topic=origin,
            queue_id=queue_id,
            body=letter.body,
            sys_flag=letter.sys_flag & BODY_SYS_FLAGS,  # a compressed body stays compressed
            flag=letter.flag,
            born_timestamp=letter.born_timestamp_ms,
            properties={k: v for k, v in letter.properties.items() if k not in _DROPPED_ON_RESEND},
        )
        response = await self._store.append([copy], letter.born_host)
        if len(response.statuses) != 1:
            raise StoreFailed(grpc.StatusCode.INTERNAL, "store answered no result")
        return to_send_response(response, origin, queue_id, self._config.broker_name)


async def bury(
    topics: TopicConfigManager,
    publisher: TopicPublisher,
    store: StoreClient,
    group: str,
    record: message_pb2.MessageExt,
    reconsume_times: int,
) -> str:
    """Append a copy of ``record``, which ``group`` consumed and gave up on, to
    ``%DLQ%<group>`` (created when missing), as ConsumerSendBack does after the last retry:
    ``RETRY_TOPIC`` names the topic it was consumed from. Returns the copy's message id;
    StoreFailed when the store did not take it."""
    copy = retry_copy(record, origin_topic(record, group) or record.topic)
    config = await ensure_dlq_topic(topics, publisher, group)
    copy.topic, copy.queue_id, copy.reconsume_times = config.name, 0, reconsume_times
    response = await store.append([copy], record.born_host)
    status = response.statuses[0] if response.statuses else message_pb2.UNKNOWN_ERROR
    if status not in STORED:
        raise StoreFailed(
            grpc.StatusCode.UNAVAILABLE,
            f"the store did not take the dead letter: "
            f"{message_pb2.PutMessageStatus.Name(status)} {response.errors.get(0, '')}".rstrip(),
        )
    return f"{response.msg_id_prefix}{response.commitlog_offsets[0]:016X}"
