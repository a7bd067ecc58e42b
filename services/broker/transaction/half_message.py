"""A half message and the records made from it (the transaction design is in
:mod:`services.broker.transaction.transaction_service`).

- the **half record** (:func:`half_record`): the producer's PREPARED message as
  stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, transaction bits cleared, with
  ``REAL_TOPIC`` / ``REAL_QID`` (where it goes when committed), ``TRAN_MSG=true``,
  ``PGROUP`` (its producer group) and a ``UNIQ_KEY`` (one is assigned when the
  producer set none: the marker is found in the index under it);
- the **real message** (:func:`real_message`): the half as its producer sent it,
  what a check-back shows;
- the **marker** (:func:`marker_message`): the COMMIT record (sys flag 0x8, the
  real message made visible) or ROLLBACK record (0xC, no body) naming the half's
  commitlog offset in ``prepared_transaction_offset``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypeAlias

from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.body_compression import BODY_SYS_FLAGS
from boltmq.wire.record import (
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_STORE_HOST_V6,
    SYS_FLAG_TRANSACTION_COMMIT,
    SYS_FLAG_TRANSACTION_MASK,
    SYS_FLAG_TRANSACTION_ROLLBACK,
)
from services.broker.metadata.topic_config import TRANS_HALF_TOPIC

Decision: TypeAlias = "broker_pb2.TransactionDecision.ValueType"

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
MARKER_FLAG = {
    broker_pb2.TRANSACTION_COMMIT: SYS_FLAG_TRANSACTION_COMMIT,
    broker_pb2.TRANSACTION_ROLLBACK: SYS_FLAG_TRANSACTION_ROLLBACK,
}
"""The sys flag of each decision's marker."""
DECISION_OF_FLAG: dict[int, Decision] = {flag: decision for decision, flag in MARKER_FLAG.items()}


@dataclass(eq=False, slots=True)
class Half:
    """An undecided half message."""

    offset: int
    group: str
    topic: str
    """Its real topic (where the COMMIT record goes)."""
    transaction_id: str
    """Its UNIQ_KEY: the marker is found in the index under it."""
    last_activity_ms: int
    """Store time, then the time of the last check."""
    check_times: int = 0


def half_record(
    message: message_pb2.Message, topic: str, queue_id: int, group: str
) -> message_pb2.Message:
    """The half record of a producer's PREPARED ``message`` bound for ``topic`` and
    ``queue_id``; ``message`` itself is left as it is."""
    half = message_pb2.Message()
    half.CopyFrom(message)
    properties = half.properties
    properties[PROPERTY_REAL_TOPIC] = topic
    properties[PROPERTY_REAL_QID] = str(queue_id)
    properties[PROPERTY_TRAN_MSG] = "true"
    properties[PROPERTY_PGROUP] = group
    if not properties.get(PROPERTY_UNIQ_KEY):
        properties[PROPERTY_UNIQ_KEY] = uuid.uuid4().hex.upper()
    half.topic, half.queue_id = TRANS_HALF_TOPIC, 0
    half.sys_flag = message.sys_flag & ~SYS_FLAG_TRANSACTION_MASK
    return half


def real_message(half: message_pb2.MessageExt) -> message_pb2.MessageExt:
    """The half message as its producer sent it: real topic and queue."""
    message = message_pb2.MessageExt()
    message.CopyFrom(half)
    message.topic = half.properties.get(PROPERTY_REAL_TOPIC, half.topic)
    message.queue_id = int(half.properties.get(PROPERTY_REAL_QID, "0"))
    return message


def marker_message(
    half: message_pb2.MessageExt, decision: Decision, offset: int
) -> message_pb2.Message:
    """The COMMIT record (the real message, now visible) or ROLLBACK record (no body)
    of the half message at ``offset``."""
    properties = {
        k: v
        for k, v in half.properties.items()
        if k not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID)
    }
    sys_flag = half.sys_flag & ~(
        SYS_FLAG_TRANSACTION_MASK | SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6
    )
    commit = decision == broker_pb2.TRANSACTION_COMMIT
    if not commit:  # the rollback marker has no body: nothing compressed
        sys_flag &= ~BODY_SYS_FLAGS
    return message_pb2.Message(
        topic=half.properties.get(PROPERTY_REAL_TOPIC, ""),
        queue_id=int(half.properties.get(PROPERTY_REAL_QID, "0")),
        body=half.body if commit else b"",
        flag=half.flag,
        tags=half.tags,
        keys=half.keys,
        properties=properties,
        born_timestamp=half.born_timestamp_ms,
        sys_flag=sys_flag | MARKER_FLAG[decision],
        prepared_transaction_offset=offset,
    )
