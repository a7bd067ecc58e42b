"""ConsumerSendBack: a push consumer's failed message goes to retry or to the DLQ.

RocketMQ's consumerSendMsgBack, step by step (docs/retry-and-delay.md):

1. the group must exist and may consume; the message is read back from the
   store by the commitlog offset the consumer got it at (an unknown offset is
   NOT_FOUND);
2. its original topic is ``RETRY_TOPIC`` when it came from the group's own
   retry topic, else its topic (a ``RETRY_TOPIC`` a client set on an ordinary
   message is overwritten); ``ORIGIN_MESSAGE_ID`` keeps the first message id.
   Only what a consumer of the group can have received goes back: a message
   of another group's retry topic, of a dead-letter topic or of a system topic
   (half messages, delay entries) is refused, and with access control on the
   caller must hold SUB on the original topic. A commitlog offset is an
   address anyone can count through, so the record fetched is authorized, not
   the request; the refusal names neither the record's topic nor its group;
3. when it was already consumed ``max_reconsume_times`` times (the request's,
   else the group's ``retry_max_times``), or the consumer asks for it, it goes
   to ``%DLQ%<group>`` and is never delivered again;
4. otherwise it goes to ``%RETRY%<group>`` with ``reconsume_times + 1`` and
   delay level ``3 + reconsume_times`` (capped at the highest level), through
   the schedule topic like any delay message, so it comes back when due.
"""

from __future__ import annotations

import itertools

import grpc

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.body_compression import BODY_SYS_FLAGS
from boltmq.wire.topic import DLQ_PREFIX, RETRY_PREFIX
from services.broker.access.acl_file import Perm
from services.broker.access.caller import caller_may
from services.broker.access.resources import topic_need
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.config import BrokerConfig
from services.broker.delay.delay_message import (
    PROPERTY_SCHEDULE_SOURCE,
    SCHEDULING_PROPERTIES,
    levels_of,
    schedule,
)
from services.broker.errors import InvalidArgument, NotFound, PermissionDenied, StoreFailed
from services.broker.metadata.group_access import GroupAccess
from services.broker.metadata.topic_config import BROKER_TOPICS, TopicConfigManager
from services.broker.retry.retry_topic import (
    dlq_topic,
    ensure_dlq_topic,
    ensure_retry_topic,
    retry_topic,
)
from services.broker.store.store_client import StoreClient
from services.broker.wire import STORED

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
RETRY_BASE_LEVEL = 3
"""A retry waits level 3 + reconsume_times (10 s, 30 s, 1 m, ... with the default levels)."""
TO_DLQ = -1
"""delay_level asking for the dead-letter queue at once."""


class SendBackProcessor:
    """Serves ConsumerSendBack."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: GroupAccess,
        store: StoreClient,
        publisher: TopicPublisher,
    ) -> None:
        self._config = config
        self._topics = topics
        self._groups = groups
        self._store = store
        self._publisher = publisher
        self._round_robin = itertools.count()

    async def send_back(
        self, request: broker_pb2.ConsumerSendBackRequest
    ) -> broker_pb2.ConsumerSendBackResponse:
        """Store the failed message again, in the retry topic or the DLQ."""
        group_config = await self._groups.require_consumable("group", request.group)
        retry_topic(request.group), dlq_topic(request.group)  # both topic names must be valid
        levels = levels_of(self._config)
        if request.delay_level < TO_DLQ or request.delay_level > levels.count:
            raise InvalidArgument(
                f"delay_level: {request.delay_level} is not -1 (DLQ), 0 "
                f"(the broker's choice) or 1..{levels.count}"
            )
        if request.max_reconsume_times < 0:
            raise InvalidArgument("max_reconsume_times: must not be negative")
        if request.commitlog_offset < 0:
            raise InvalidArgument("commitlog_offset: must not be negative")
        found = await self._store.get(
            store_pb2.GetRequest(commitlog_offset=request.commitlog_offset)
        )
        if not found.found:
            raise NotFound(f"commitlog_offset: no message at {request.commitlog_offset}")
        original = found.message
        origin = origin_topic(original, request.group)
        if origin is None or not caller_may(topic_need(origin, Perm.SUB)):
            raise PermissionDenied(
                f"commitlog_offset: the message at {request.commitlog_offset} is not one "
                f"consumer group {request.group!r} may send back (a message it consumed "
                f"from a topic this account may consume)"
            )
        max_times = request.max_reconsume_times or group_config.retry_max_times
        copy = retry_copy(original, origin)
        if original.reconsume_times >= max_times or request.delay_level == TO_DLQ:
            config = await ensure_dlq_topic(self._topics, self._publisher, request.group)
            copy.topic, copy.queue_id = config.name, 0
            delay_level = 0
        else:
            config = await ensure_retry_topic(self._topics, self._publisher, group_config)
            copy.topic = config.name
            copy.queue_id = next(self._round_robin) % config.write_queue_nums
            copy.reconsume_times = original.reconsume_times + 1
            copy.properties[PROPERTY_RECONSUME_TIME] = str(copy.reconsume_times)
            copy.properties[PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
            delay_level = levels.clamp(
                request.delay_level or RETRY_BASE_LEVEL + original.reconsume_times
            )
            schedule(copy, delay_level, levels.delay_ms(delay_level))
        response = await self._store.append([copy], original.born_host)
        status = response.statuses[0] if response.statuses else message_pb2.UNKNOWN_ERROR
        if status not in STORED:
            raise StoreFailed(
                grpc.StatusCode.UNAVAILABLE,
                f"the store did not take the message back: "
                f"{message_pb2.PutMessageStatus.Name(status)} "
                f"{response.errors.get(0, '')}".rstrip(),
            )
        return broker_pb2.ConsumerSendBackResponse(
            topic=config.name,
            dead_letter=delay_level == 0,
            reconsume_times=copy.reconsume_times,
            delay_level=delay_level,
            msg_id=f"{response.msg_id_prefix}{response.commitlog_offsets[0]:016X}",
        )


def origin_topic(record: message_pb2.MessageExt, group: str) -> str | None:
    """The topic ``group`` consumed ``record`` from; None when no consumer of the group
    can have received it (step 2 of the module docstring)."""
    if record.topic == retry_topic(group):
        origin = record.properties.get(PROPERTY_RETRY_TOPIC, "")
    else:
        origin = record.topic
    if not origin or origin.startswith((RETRY_PREFIX, DLQ_PREFIX)) or origin in BROKER_TOPICS:
        return None
    return origin


def retry_copy(original: message_pb2.MessageExt, origin: str) -> message_pb2.Message:
    """The message as it goes back: same body (and its compression bits), flag, born
    time and user properties, ``RETRY_TOPIC`` = ``origin``."""
    props = {
        k: v
        for k, v in original.properties.items()
        if k not in SCHEDULING_PROPERTIES and k != PROPERTY_SCHEDULE_SOURCE
    }
    if original.topic != origin:  # from the retry topic: its first id is kept
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, original.msg_id)
    else:
        props[PROPERTY_ORIGIN_MESSAGE_ID] = original.msg_id
    props[PROPERTY_RETRY_TOPIC] = origin
    return message_pb2.Message(
        body=original.body,
        sys_flag=original.sys_flag & BODY_SYS_FLAGS,  # a compressed body stays compressed
        flag=original.flag,
        properties=props,
        born_timestamp=original.born_timestamp_ms,
        reconsume_times=original.reconsume_times,
    )
