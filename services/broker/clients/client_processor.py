"""Client-facing group RPCs: heartbeats, member lists, consumer offsets, queue locks."""

from __future__ import annotations

from boltmq.v1 import broker_pb2
from services.broker.access.creation_limits import CreationLimits
from services.broker.clients.client_manager import (
    BROADCASTING,
    CLUSTERING,
    MESSAGE_MODELS,
    ClientInfo,
    ClientManager,
    ConsumerGroupHeartbeat,
)
from services.broker.clients.queue_lock import QueueKey, QueueLockManager
from services.broker.errors import InvalidArgument, PermissionDenied
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.group_access import GroupAccess
from services.broker.metadata.names import (
    check_client_id,
    check_expression_type,
    check_group,
    check_subscription,
    check_topic,
)
from services.broker.metadata.topic_config import TopicConfigManager
from services.broker.pull.read_check import check_queue_count, check_read_queue, readable_topic
from services.broker.retry.retry_topic import RetryTopics

MAX_GROUPS_PER_HEARTBEAT = 1024
"""Producer plus consumer groups one heartbeat may carry."""
MAX_QUEUES_PER_LOCK = 4096
"""Queues one LockQueues / UnlockQueues request may name."""
QUERY_OFFSETS_MAX = 4096
"""Queues one QueryConsumerOffsets or UpdateConsumerOffsets names at most."""
CLIENT_LABEL_MAX = 64
"""Characters of a heartbeat's language or version at most (printable ASCII)."""


class ClientProcessor:
    """Heartbeats, membership, offsets and orderly-consumption locks."""

    def __init__(
        self,
        topics: TopicConfigManager,
        groups: GroupAccess,
        clients: ClientManager,
        offsets: ConsumerOffsetManager,
        locks: QueueLockManager,
        retry_topics: RetryTopics,
        creations: CreationLimits,
    ) -> None:
        self._topics = topics
        self._groups = groups
        self._clients = clients
        self._offsets = offsets
        self._locks = locks
        self._retry_topics = retry_topics
        """Creates a clustering group's %RETRY% topic on its heartbeat."""
        self._creations = creations
        """Caps the groups and retry topics a heartbeat creates."""

    async def heartbeat(self, request: broker_pb2.HeartbeatRequest, peer: str = "") -> None:
        """Record the client in each group it names (consumer groups are created on demand).

        ``peer``: gRPC's name of the caller (``ipv4:127.0.0.1:5000``), kept as its address."""
        client_id = check_client_id("client_id", request.client_id)
        info = ClientInfo(
            peer_address(peer),
            _label("language", request.language),
            _label("version", request.version),
        )
        if len(request.producer_groups) + len(request.consumer_groups) > MAX_GROUPS_PER_HEARTBEAT:
            raise InvalidArgument(
                f"consumer_groups: at most {MAX_GROUPS_PER_HEARTBEAT} groups per heartbeat"
            )
        for index, group in enumerate(request.producer_groups):
            check_group(f"producer_groups[{index}]", group)
        beats = [_consumer_beat(index, beat) for index, beat in enumerate(request.consumer_groups)]
        self._creations.charge(self._creations_of(beats), "consumer_groups")
        for index, beat in enumerate(beats):
            config = await self._groups.require(
                f"consumer_groups[{index}].group", beat.group, charged=True
            )
            if beat.model == BROADCASTING and not config.consume_broadcast_enable:
                raise PermissionDenied(
                    f"consumer_groups[{index}].model: consumer group {beat.group!r} may not "
                    f"consume BROADCASTING (consumeBroadcastEnable is false)"
                )
            if beat.model == CLUSTERING:
                await self._retry_topics.ensure_retry(config)  # consumers subscribe to it at once
        self._clients.heartbeat(client_id, request.producer_groups, beats, info)

    def _creations_of(self, beats: list[ConsumerGroupHeartbeat]) -> int:
        """Groups and retry topics a heartbeat would create (charged before any is)."""
        if not self._groups.auto_create:
            return 0  # no group is created: the heartbeat fails on the first unknown one
        new_groups = {b.group for b in beats if not self._groups.exists(b.group)}
        new_retry = {
            b.group for b in beats if b.model == CLUSTERING and self._retry_topics.missing(b.group)
        }
        return len(new_groups) + len(new_retry)

    def unregister(self, request: broker_pb2.UnregisterClientRequest) -> None:
        """Remove the client from the groups it names and release its queue locks there."""
        client_id = check_client_id("client_id", request.client_id)
        for index, group in enumerate(request.producer_groups):
            check_group(f"producer_groups[{index}]", group)
        for index, group in enumerate(request.consumer_groups):
            check_group(f"consumer_groups[{index}]", group)
        self._clients.unregister(client_id, request.producer_groups, request.consumer_groups)
        for group in request.consumer_groups:
            self._locks.unlock_client(group, client_id)

    def consumer_list(self, request: broker_pb2.GetConsumerListRequest) -> list[str]:
        """The live members of a consumer group that share its queues, sorted (those
        subscribing unlike most are left out: :meth:`ClientManager.allocation_ids`)."""
        return self._clients.allocation_ids(check_group("group", request.group))

    async def update_offset(self, request: broker_pb2.UpdateConsumerOffsetRequest) -> None:
        """Commit a group's offset on one queue."""
        config = readable_topic(self._topics, "topic", request.topic)
        check_read_queue(config, "queue_id", request.queue_id)
        if request.offset < 0:
            raise InvalidArgument(f"offset: must not be negative, got {request.offset}")
        await self._groups.require("group", request.group)
        self._offsets.commit(request.group, request.topic, request.queue_id, request.offset)

    async def update_offsets(self, request: broker_pb2.UpdateConsumerOffsetsRequest) -> None:
        """Commit a group's offsets on several queues; every entry is checked before any
        is committed (a bad one fails the call and commits nothing)."""
        group = check_group("group", request.group)
        check_queue_count("offsets", len(request.offsets), QUERY_OFFSETS_MAX)
        seen: dict[tuple[str, int], int] = {}
        for n, entry in enumerate(request.offsets):
            config = readable_topic(self._topics, f"offsets[{n}].topic", entry.topic)
            check_read_queue(config, f"offsets[{n}].queue_id", entry.queue_id)
            if entry.offset < 0:
                raise InvalidArgument(
                    f"offsets[{n}].offset: must not be negative, got {entry.offset}"
                )
            first = seen.setdefault((entry.topic, entry.queue_id), n)
            if first != n:
                queue = f"{entry.topic}:{entry.queue_id}"
                raise InvalidArgument(f"offsets[{n}]: queue {queue} is offsets[{first}] already")
        await self._groups.require("group", group)
        for entry in request.offsets:
            self._offsets.commit(group, entry.topic, entry.queue_id, entry.offset)

    def query_offsets(self, request: broker_pb2.QueryConsumerOffsetsRequest) -> list[int | None]:
        """A group's committed offsets on several queues, in the order asked (None: none).

        Every queue is checked before any is answered."""
        group = check_group("group", request.group)
        check_queue_count("queues", len(request.queues), QUERY_OFFSETS_MAX)
        for n, queue in enumerate(request.queues):
            config = readable_topic(self._topics, f"queues[{n}].topic", queue.topic)
            check_read_queue(config, f"queues[{n}].queue_id", queue.queue_id)
        return [self._offsets.query(group, queue.topic, queue.queue_id) for queue in request.queues]

    def query_offset(self, request: broker_pb2.QueryConsumerOffsetRequest) -> int | None:
        """A group's committed offset on one queue, or None."""
        check_group("group", request.group)
        config = readable_topic(self._topics, "topic", request.topic)
        check_read_queue(config, "queue_id", request.queue_id)
        return self._offsets.query(request.group, request.topic, request.queue_id)

    def lock(self, request: broker_pb2.LockQueuesRequest) -> list[QueueKey]:
        """Lock or renew queues for an orderly consumer; return those it now holds."""
        group, client_id, queues = _lock_request(request)
        return self._locks.try_lock(group, client_id, queues)

    def unlock(self, request: broker_pb2.LockQueuesRequest) -> list[QueueKey]:
        """Release queues the client holds; return those released."""
        group, client_id, queues = _lock_request(request)
        return self._locks.unlock(group, client_id, queues)


def peer_address(peer: str) -> str:
    """``host:port`` of a gRPC peer name (``ipv4:h:p``, ``ipv6:[h]:p``); others as given."""
    for scheme in ("ipv4:", "ipv6:"):
        if peer.startswith(scheme):
            return peer[len(scheme) :]
    return peer


def _label(field: str, value: str) -> str:
    if len(value) > CLIENT_LABEL_MAX or not all(" " <= c <= "~" for c in value):
        raise InvalidArgument(
            f"{field}: at most {CLIENT_LABEL_MAX} printable ASCII characters, got {value[:40]!r}"
        )
    return value


def _consumer_beat(index: int, beat: broker_pb2.ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeat:
    field = f"consumer_groups[{index}]"
    check_group(f"{field}.group", beat.group)
    model = beat.model or CLUSTERING
    if model not in MESSAGE_MODELS:
        raise InvalidArgument(
            f"{field}.model: {beat.model[:40]!r} is not one of {', '.join(MESSAGE_MODELS)}"
        )
    subscriptions = []
    for number, sub in enumerate(beat.subscriptions):
        check_topic(f"{field}.subscriptions[{number}].topic", sub.topic)
        where = f"{field}.subscriptions[{number}].expression"
        check_subscription(where, sub.expression, sub.expression_type, f"{where}_type")
        kind = check_expression_type(f"{where}_type", sub.expression_type)
        subscriptions.append((sub.topic, sub.expression or "*", kind))
    return ConsumerGroupHeartbeat(beat.group, model, beat.orderly, tuple(subscriptions))


def _lock_request(request: broker_pb2.LockQueuesRequest) -> tuple[str, str, list[QueueKey]]:
    group = check_group("group", request.group)
    client_id = check_client_id("client_id", request.client_id)
    if len(request.queues) > MAX_QUEUES_PER_LOCK:
        raise InvalidArgument(f"queues: at most {MAX_QUEUES_PER_LOCK} queues per request")
    queues = []
    for index, queue in enumerate(request.queues):
        check_topic(f"queues[{index}].topic", queue.topic)
        if queue.queue_id < 0:
            raise InvalidArgument(f"queues[{index}].queue_id: must not be negative")
        queues.append((queue.topic, queue.queue_id))
    return group, client_id, queues
