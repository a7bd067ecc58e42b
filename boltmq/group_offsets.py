"""Group offsets: a CLUSTERING consumer group's offsets as its brokers keep them, many at a time.

A consumer of 1,024 topics owns 4,096 queues. One call per queue would cost it a
round trip each when it takes them over (where does each start?) and again at
every commit round and at shutdown (4,096 sequential calls took about 0.6 s on the
machine of bench/RESULTS.md). So both go by broker:

- :func:`query_offsets`: one ``QueryConsumerOffsets`` per broker and per
  :data:`OFFSETS_PER_CALL` queues, all in flight at once;
- :func:`commit_offsets`: one ``UpdateConsumerOffsets`` per broker and per
  :data:`OFFSETS_PER_CALL` queues, all in flight at once. A broker that does not
  know that call (``UNIMPLEMENTED``: one older than it) gets one
  ``UpdateConsumerOffset`` per queue instead, as before.

A call that fails is logged and its queues are left out of the answer: the
caller commits them again at its next round, or starts them at ``consume_from``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import grpc

from boltmq.client import BrokerUnavailable, ClientInstance, rpc_error_text
from boltmq.kernel.registry_client import RegistryError
from boltmq.message import MessageQueue
from boltmq.v1 import broker_pb2

log = logging.getLogger(__name__)

OFFSETS_PER_CALL = 4096
"""Queues of one QueryConsumerOffsets or UpdateConsumerOffsets at most (the broker's limit)."""


def _by_broker(
    client: ClientInstance, queues: Sequence[MessageQueue], *, skip_unknown: bool = False
) -> list[tuple[str, list[MessageQueue]]]:
    """``(broker address, at most OFFSETS_PER_CALL of its queues)`` pairs covering
    ``queues``. A queue whose broker is unknown raises (RegistryError,
    BrokerUnavailable), or with ``skip_unknown`` is logged and left out."""
    by_broker: dict[str, list[MessageQueue]] = {}
    for queue in queues:
        try:
            address = client.address_of(queue)
        except (RegistryError, BrokerUnavailable) as exc:
            if not skip_unknown:
                raise
            log.warning("offset of %s not committed: %s", queue, exc)
            continue
        by_broker.setdefault(address, []).append(queue)
    return [
        (address, owned[n : n + OFFSETS_PER_CALL])
        for address, owned in by_broker.items()
        for n in range(0, len(owned), OFFSETS_PER_CALL)
    ]


def query_offsets(
    client: ClientInstance, group: str, queues: Sequence[MessageQueue]
) -> dict[MessageQueue, int]:
    """The committed offsets of ``group`` on ``queues`` (those with none are absent);
    raises grpc.RpcError when a call fails, RegistryError or BrokerUnavailable when a
    queue's broker is unknown (the caller must not guess a start then)."""
    calls = [
        (
            chunk,
            client.broker(address).QueryConsumerOffsets.future(
                broker_pb2.QueryConsumerOffsetsRequest(
                    group=group,
                    queues=[broker_pb2.QueueId(topic=q.topic, queue_id=q.queue_id) for q in chunk],
                ),
                timeout=client.rpc_timeout_s,
            ),
        )
        for address, chunk in _by_broker(client, queues)
    ]
    found: dict[MessageQueue, int] = {}
    for chunk, call in calls:
        for queue, answer in zip(chunk, call.result().offsets, strict=True):
            if answer.found:
                found[queue] = int(answer.offset)
    return found


def commit_offsets(
    client: ClientInstance, group: str, offsets: Mapping[MessageQueue, int]
) -> list[MessageQueue]:
    """Commit ``offsets`` (queue -> the next message to consume) for ``group``; the
    queues committed (a failed call's are logged and left out)."""
    calls = [
        (
            address,
            chunk,
            client.broker(address).UpdateConsumerOffsets.future(
                broker_pb2.UpdateConsumerOffsetsRequest(
                    group=group,
                    offsets=[
                        broker_pb2.QueueOffset(
                            topic=q.topic, queue_id=q.queue_id, offset=offsets[q]
                        )
                        for q in chunk
                    ],
                ),
                timeout=client.rpc_timeout_s,
            ),
        )
        for address, chunk in _by_broker(client, list(offsets), skip_unknown=True)
    ]
    committed: list[MessageQueue] = []
    for address, chunk, call in calls:
        try:
            call.result()
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                committed += _commit_one_by_one(client, address, group, chunk, offsets)
            else:
                log.warning(
                    "commit of %d queue(s) at %s failed: %s",
                    len(chunk),
                    address,
                    rpc_error_text(exc),
                )
            continue
        committed += chunk
    return committed


def _commit_one_by_one(
    client: ClientInstance,
    address: str,
    group: str,
    queues: Sequence[MessageQueue],
    offsets: Mapping[MessageQueue, int],
) -> list[MessageQueue]:
    """A broker without UpdateConsumerOffsets: one UpdateConsumerOffset a queue."""
    committed = []
    for queue in queues:
        try:
            client.broker(address).UpdateConsumerOffset(
                broker_pb2.UpdateConsumerOffsetRequest(
                    group=group, topic=queue.topic, queue_id=queue.queue_id, offset=offsets[queue]
                ),
                timeout=client.rpc_timeout_s,
            )
        except grpc.RpcError as exc:
            log.warning("commit %s@%d failed: %s", queue, offsets[queue], rpc_error_text(exc))
            continue
        committed.append(queue)
    return committed
