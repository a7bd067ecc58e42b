"""SQL92 subscriptions on the broker: the store's pull answer kept to the matching messages.

The store filters by tag only (the consume queue's tag hash). A pull whose
expression type is SQL92 (:mod:`boltmq.wire.sql_filter`, docs/filters.md) asks
the store for every message ("*") and the broker keeps those whose properties
satisfy the condition, re-encoding the answer around them (records stay views
until the one join). A read whose messages all fail is answered
NO_MATCHED_MESSAGE with the store's ``next_begin_offset``, as the store answers
a tag filter that matched nothing: the consumer pulls on from there at once,
and a pull at the end of the queue parks (long polling) as any other.
"""

from __future__ import annotations

from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.pull_answer import PullAnswer, encode_pull, split_records
from boltmq.wire.record import decode_records
from boltmq.wire.sql_filter import SqlFilter


def filter_answer(answer: PullAnswer, condition: SqlFilter) -> PullAnswer:
    """``answer`` (a store's PullMessage answer) with only the messages ``condition`` keeps."""
    if answer.response.status != message_pb2.FOUND:
        return answer
    head, records = split_records(answer.encoded)
    kept = _filter(head, records, condition)
    return PullAnswer(head, encode_pull(head, kept))


def filter_response(
    response: store_pb2.PullResponse, condition: SqlFilter
) -> store_pb2.PullResponse:
    """``response`` (one answer of PullQueues, records included) kept to the matching ones."""
    if response.status != message_pb2.FOUND:
        return response
    head = store_pb2.PullResponse()
    head.CopyFrom(response)
    head.ClearField("records")
    kept = _filter(head, memoryview(response.records), condition)
    head.records = b"".join(kept)
    return head


def _filter(
    head: store_pb2.PullResponse, records: memoryview, condition: SqlFilter
) -> list[memoryview]:
    """The matching records of ``records`` (or keeps the matching ``head.messages``);
    ``head`` is set to the count and status of what is kept."""
    kept: list[memoryview] = []
    if head.messages:
        matching = [m for m in head.messages if condition.matches(m.properties)]
        del head.messages[:]
        head.messages.extend(matching)
        count = len(matching)
    else:
        position = 0
        for record in decode_records(records, check_crc=False):
            end = position + record.total_size
            if condition.matches(record.properties):
                kept.append(records[position:end])
            position = end
        count = head.record_count = len(kept)
    if count == 0:
        head.status = message_pb2.NO_MATCHED_MESSAGE
    return kept
