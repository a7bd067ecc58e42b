"""Sender: the protocol's SendMessage, EndTransaction and RecallMessage over BoltMQ's.

Each message of a SendMessage is checked and mapped
(:mod:`services.broker.rocketmq_v2.message_mapping`), then stored alone through
BoltMQ's :class:`~services.broker.send.send_processor.SendProcessor` (one topic and
queue per BoltMQ batch), and answered with an entry of its own: its status, its
message id (the client's), its queue offset, and for a half message its transaction
id. The response's status is the one entry's when there is one, OK when every entry
is OK, else MULTIPLE_RESULTS.

- **Normal and delayed** messages go to the queue BoltMQ picks (round-robin); the
  delay service holds a delayed one until its ``TIMER_DELIVER_MS``.
- **FIFO**: the message group picks the queue (CRC32 of the group modulo the topic's
  write queues on this broker), so one group's messages keep their order in one queue;
  the client routes a group to one broker the same way.
- **Transactions**: the protocol's producers have no producer group, so a half
  message belongs to the group ``%RMQ_V2%<topic>`` (:func:`producer_group_of`): every
  producer that publishes the topic may end it and receives its check-backs
  (:mod:`services.broker.rocketmq_v2.telemetry_session`). The transaction id is the
  half message's commitlog offset in decimal; EndTransaction with another one is
  INVALID_TRANSACTION_ID.
- **RecallMessage** answers UNSUPPORTED: BoltMQ's delay service keeps scheduled
  messages in an append-only queue and delivers every entry it reads, so a scheduled
  message cannot be taken back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2 as service
from boltmq.v1 import broker_pb2, message_pb2
from services.broker.access.caller import Caller
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError
from services.broker.metadata.topic_config import TopicConfig, TopicConfigManager
from services.broker.rocketmq_v2.credentials import may_publish, require
from services.broker.rocketmq_v2.message_mapping import (
    PROPERTY_SHARDING_KEY,
    queue_of_group,
    to_boltmq,
    topic_of,
)
from services.broker.rocketmq_v2.status import (
    OK,
    Code,
    Refused,
    code_of_grpc,
    code_of_send,
    status,
)
from services.broker.send.send_processor import SendProcessor
from services.broker.transaction.transaction_service import TransactionService

PRODUCER_GROUP_PREFIX = "%RMQ_V2%"
"""The producer group of the protocol's half messages: this prefix and the topic."""
_DECISION_OF = {
    v2.COMMIT: broker_pb2.TRANSACTION_COMMIT,
    v2.ROLLBACK: broker_pb2.TRANSACTION_ROLLBACK,
}


def producer_group_of(topic: str) -> str:
    """The BoltMQ producer group of a topic's half messages sent through the protocol."""
    return PRODUCER_GROUP_PREFIX + topic


class Sender:
    """SendMessage, EndTransaction and RecallMessage."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        sends: SendProcessor,
        transactions: TransactionService,
        auto_create: Callable[[str], Awaitable[TopicConfig]],
    ) -> None:
        self._config = config
        self._topics = topics
        self._sends = sends
        self._transactions = transactions
        self._auto_create = auto_create

    async def send(
        self, request: service.SendMessageRequest, caller: Caller | None, peer_address: str
    ) -> service.SendMessageResponse:
        if not request.messages:
            raise Refused(v2.BAD_REQUEST, "messages: at least one message is required")
        if len(request.messages) > self._config.max_batch_messages:
            raise Refused(
                v2.BAD_REQUEST,
                f"messages: {len(request.messages)} in one request, "
                f"at most {self._config.max_batch_messages}",
            )
        entries = []
        for index, message in enumerate(request.messages):
            try:
                entries.append(await self._send_one(index, message, caller, peer_address))
            except Refused as exc:
                entries.append(
                    service.SendResultEntry(
                        status=exc.status(), message_id=message.system_properties.message_id
                    )
                )
        if len(entries) == 1:
            overall = entries[0].status
        elif all(e.status.code == v2.OK for e in entries):
            overall = OK
        else:
            overall = status(v2.MULTIPLE_RESULTS, "some messages were not stored: see entries")
        return service.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(
        self, index: int, message: v2.Message, caller: Caller | None, peer_address: str
    ) -> service.SendResultEntry:
        stored = to_boltmq(
            message,
            index,
            self._config.max_message_size_bytes,
            self._config.deliver_at_max_delay_ms,
        )
        require(caller, may_publish(stored.topic))
        group = stored.properties.get(PROPERTY_SHARDING_KEY, "")
        try:
            if group:
                config = self._topics.get(stored.topic) or await self._auto_create(stored.topic)
                if config.write_queue_nums > 0:
                    stored.queue_id = queue_of_group(group, config.write_queue_nums)
            half = message.system_properties.message_type == v2.TRANSACTION
            answer = await self._sends.send(
                broker_pb2.SendRequest(
                    producer_group=producer_group_of(stored.topic) if half else "",
                    messages=[stored],
                ),
                peer_address,
            )
        except BrokerError as exc:
            raise Refused(_code_of(exc), f"messages[{index}]: {exc}") from None
        return _entry(answer, message.system_properties.message_id, half)

    async def end_transaction(
        self, request: service.EndTransactionRequest, caller: Caller | None
    ) -> service.EndTransactionResponse:
        topic = topic_of(request.topic, "topic")
        require(caller, may_publish(topic))
        if request.resolution not in _DECISION_OF:
            raise Refused(v2.BAD_REQUEST, "resolution: COMMIT or ROLLBACK")
        text = request.transaction_id
        if not (text.isascii() and text.isdigit() and len(text) <= 19):
            raise Refused(
                v2.INVALID_TRANSACTION_ID,
                f"transaction_id {text[:40]!r}: not one this broker gave (a decimal offset)",
            )
        decision = _DECISION_OF[request.resolution]
        try:
            answer = await self._transactions.end(
                broker_pb2.EndTransactionRequest(
                    producer_group=producer_group_of(topic),
                    prepared_commitlog_offset=int(text),
                    decision=decision,
                    from_check=request.source == v2.SOURCE_SERVER_CHECK,
                )
            )
        except BrokerError as exc:
            code = _code_of(exc)
            raise Refused(
                v2.INVALID_TRANSACTION_ID if code == v2.NOT_FOUND else code,
                f"transaction {text} of topic {topic!r}: {exc}",
            ) from None
        if answer.already_decided and answer.decision not in (
            decision,
            broker_pb2.TRANSACTION_UNKNOWN,
        ):
            raise Refused(
                v2.PRECONDITION_FAILED,
                f"transaction {text} was already decided "
                f"{broker_pb2.TransactionDecision.Name(answer.decision)}",
            )
        return service.EndTransactionResponse(status=OK)

    @staticmethod
    def recall() -> service.RecallMessageResponse:
        return service.RecallMessageResponse(
            status=status(
                v2.UNSUPPORTED,
                "RecallMessage: BoltMQ's delay service cannot take back a scheduled "
                "message (its schedule queue is append-only)",
            )
        )


def _code_of(exc: BrokerError) -> Code:
    code = code_of_grpc(exc.code)
    return v2.TOPIC_NOT_FOUND if code == v2.NOT_FOUND and "topic" in str(exc) else code


def _entry(answer: broker_pb2.SendResponse, message_id: str, half: bool) -> service.SendResultEntry:
    if not answer.statuses:
        return service.SendResultEntry(
            status=status(v2.INTERNAL_SERVER_ERROR, "the store answered no result"),
            message_id=message_id,
        )
    code = code_of_send(answer.statuses[0], answer.put_statuses[0] if answer.put_statuses else 0)
    why = answer.errors.get(0) or (
        "OK" if code == v2.OK else message_pb2.PutMessageStatus.Name(answer.put_statuses[0])
    )
    entry = service.SendResultEntry(
        status=status(code, why),
        message_id=message_id,
        offset=max(answer.queue_offsets[0], 0) if answer.queue_offsets else 0,
    )
    if half and answer.commitlog_offsets and answer.commitlog_offsets[0] >= 0:
        entry.transaction_id = str(answer.commitlog_offsets[0])
    return entry
