"""Message lookup: the stored copies of a message, found by its unique id.

A producer's unique id (``UNIQ_KEY``, :mod:`boltmq.unique_id`) is indexed by
every store like a key, under the message's topic. :func:`find_by_unique_id`
asks the master of every broker group of the topic's route (its
``QueryMessageByKey``, which needs SUB on the topic when the ACL is on) and
keeps the messages whose ``UNIQ_KEY`` is the id (an index entry is a hash of
topic and key: another key may share it). A send retried after its answer
was lost may have left a copy on two groups: every copy is returned.
"""

from __future__ import annotations

import grpc

from boltmq.client import BoltMQError, ClientInstance, rpc_error_text
from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record import PROPERTY_UNIQ_KEY

MAX_COPIES = 16
"""Messages asked of each group's index at most (copies of one id are few)."""


def find_by_unique_id(
    client: ClientInstance, topic: str, unique_id: str
) -> list[message_pb2.MessageExt]:
    """Every stored copy of the message of ``topic`` whose unique id is ``unique_id``,
    oldest store time first ([] when none). ValueError for an empty topic or id;
    TopicNotFound when no registry knows the topic; BoltMQError when a group's
    master does not answer (a copy there could be missed)."""
    if not topic or not unique_id:
        raise ValueError("give a topic and a unique id")
    if any(c.isspace() for c in unique_id):
        raise ValueError(f"unique id {unique_id!r} must not contain spaces")
    route = client.route(topic)
    request = store_pb2.QueryByKeyRequest(topic=topic, key=unique_id, max_count=MAX_COPIES)
    found: list[message_pb2.MessageExt] = []
    for name in sorted({b.broker_name for b in route.brokers}):
        address = client.broker_address(route, name)
        if address is None:
            raise BoltMQError(f"broker group {name!r} of {topic!r} has no live master")
        try:
            response = client.broker(address).QueryMessageByKey(
                request, timeout=client.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:  # the topic is not on that group
                continue
            raise BoltMQError(f"QueryMessageByKey on {address}: {rpc_error_text(exc)}") from None
        found += [m for m in response.messages if m.properties.get(PROPERTY_UNIQ_KEY) == unique_id]
    return sorted(found, key=lambda m: m.store_timestamp_ms)
