"""Admin RPCs: topic upsert/delete/list/status, group upsert/delete/show, groups and their
lag, message lookup."""

from __future__ import annotations

from collections.abc import Callable

from boltmq.v1 import broker_pb2, store_pb2
from boltmq.wire.topic import DLQ_PREFIX, RETRY_PREFIX
from services.broker.admin import group_settings
from services.broker.admin.message_track import MessageTracker
from services.broker.clients.client_manager import ClientManager
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.config import BrokerConfig
from services.broker.errors import FailedPrecondition, InvalidArgument, NotFound
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.names import check_group, check_topic
from services.broker.metadata.persister import MetadataPersister
from services.broker.metadata.pop_state import PopState
from services.broker.metadata.subscription_group import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from services.broker.metadata.topic_config import PERM_ALL, TopicConfig, TopicConfigManager
from services.broker.retry.retry_topic import resize_retry_topic
from services.broker.stats.traffic_stats import Counts, Traffic, TrafficStats
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole


class AdminProcessor:
    """Operator-facing reads and writes of topics, groups and messages."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        clients: ClientManager,
        store: StoreClient,
        publisher: TopicPublisher,
        role: StoreRole,
        persister: MetadataPersister,
        advertised_address: Callable[[], str],
        traffic: TrafficStats,
        pop_state: PopState | None = None,
    ) -> None:
        self._config = config
        self._pop_state = pop_state or PopState()
        """POP groups' state, forgotten with a deleted topic as offsets are."""
        self._role = role
        self._persister = persister
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._clients = clients
        self._store = store
        self._publisher = publisher
        self._advertised_address = advertised_address
        """``host:port`` of this broker, known once the server is bound."""
        self._traffic = traffic
        self._tracker = MessageTracker(store, offsets, clients)

    async def track_message(
        self, request: broker_pb2.TrackMessageRequest
    ) -> broker_pb2.TrackMessageResponse:
        """What became of one message for every group of its topic (:mod:`.message_track`)."""
        return await self._tracker.track(request)

    async def broker_info(self) -> broker_pb2.BrokerInfo:
        """Who this broker is and what its store reports."""
        config = self._config
        return broker_pb2.BrokerInfo(
            cluster_name=config.cluster_name,
            broker_name=config.broker_name,
            broker_id=self._role.broker_id,
            address=self._advertised_address(),
            store_address=config.store_address,
            store=await self._store.store_info(),
        )

    def metadata(self) -> broker_pb2.GetMetadataResponse:
        """Every metadata document as the broker holds it now (replicas copy them)."""
        return broker_pb2.GetMetadataResponse(documents=self._persister.documents())

    async def promote(self, request: broker_pb2.PromoteRequest) -> broker_pb2.BrokerInfo:
        """Make this broker's store the group's master, then report the new state."""
        if request.max_lag_bytes < 0:
            raise InvalidArgument("max_lag_bytes: must not be negative")
        await self._role.promote(request.max_lag_bytes)
        return await self.broker_info()

    def _require_master(self, what: str) -> None:
        if not self._role.is_master:
            raise FailedPrecondition(
                f"this broker's store is a replica: {what} on the group's "
                f"master (replicas copy its metadata)"
            )

    async def upsert_group(self, request: broker_pb2.UpsertGroupRequest) -> SubscriptionGroupConfig:
        """Create or change a consumer group's settings and save them (settings the request
        leaves unset kept; :mod:`~services.broker.admin.group_settings`)."""
        self._require_master("create and change groups")
        name = check_group("group", request.group)
        current = self._groups.get(name) or SubscriptionGroupConfig(name)
        config = group_settings.updated(current, request, self._config.max_topic_queue_nums)
        self._groups.upsert(config)
        await self._persister.save_groups()
        await resize_retry_topic(self._topics, self._publisher, config)
        return config

    async def delete_group(self, request: broker_pb2.DeleteGroupRequest) -> None:
        """Forget a consumer group's settings; refused while it has live consumers unless
        ``force`` (its offsets and retry and dead-letter topics are kept)."""
        self._require_master("delete groups")
        name = check_group("group", request.group)
        if self._groups.get(name) is None:
            raise NotFound(f"group: consumer group {name!r} does not exist")
        members = self._clients.consumer_ids(name)
        if members and not request.force:
            raise FailedPrecondition(
                f"group: consumer group {name!r} has {len(members)} live consumer(s) "
                f"({', '.join(members[:5])}); stop them first or delete with force"
            )
        self._groups.delete(name)
        await self._persister.save_groups()

    def connections(
        self, request: broker_pb2.GetConnectionsRequest
    ) -> broker_pb2.GetConnectionsResponse:
        """A group's live producer or consumer clients (empty when none heartbeats here)."""
        name = check_group("group", request.group)
        if request.kind not in ("producer", "consumer"):
            raise InvalidArgument(f"kind: 'producer' or 'consumer', got {request.kind[:40]!r}")
        return broker_pb2.GetConnectionsResponse(
            connections=[
                broker_pb2.ClientConnection(
                    client_id=c.client_id,
                    address=c.info.address,
                    language=c.info.language,
                    version=c.info.version,
                    since_ms=c.since_ms,
                    model=c.model,
                    subscriptions=[
                        broker_pb2.ConsumerSubscription(topic=t, expression=e, expression_type=k)
                        for t, e, k in c.subscriptions
                    ],
                )
                for c in self._clients.connections(name, producers=request.kind == "producer")
            ]
        )

    def traffic(
        self, request: broker_pb2.GetTrafficStatsRequest
    ) -> broker_pb2.GetTrafficStatsResponse:
        """A topic's, a consumer group's or every user topic's messages over the last minute
        and hour here."""
        which = request.WhichOneof("of")
        if which == "topic":
            topic = check_topic("topic", request.topic)
            if self._topics.get(topic) is None and not self._traffic.knows_topic(topic):
                raise NotFound(f"topic: {topic!r} is unknown here")
            return _traffic_message(self._traffic.topic(topic))
        if which == "group":
            group = check_group("group", request.group)
            if self._groups.get(group) is None and not self._traffic.knows_group(group):
                raise NotFound(f"group: consumer group {group!r} is unknown here")
            return _traffic_message(self._traffic.group(group))
        if which == "broker" and request.broker:
            return _traffic_message(self._traffic.everything(self._user_topic))
        raise InvalidArgument("of: name a topic or a group (or broker: true)")

    def _user_topic(self, name: str) -> bool:
        """Not one of the broker's own topics, nor a group's retry or dead-letter topic."""
        return not self._topics.is_system(name) and not name.startswith((RETRY_PREFIX, DLQ_PREFIX))

    def get_group(self, request: broker_pb2.GetGroupRequest) -> broker_pb2.GetGroupResponse:
        """A group's settings and its live members with their own subscriptions."""
        name = check_group("group", request.group)
        config = self._groups.get(name)
        members = self._clients.members(name)
        if config is None and not members:
            raise NotFound(f"group: consumer group {name!r} is unknown")
        sharing = set(self._clients.allocation_ids(name))
        response = broker_pb2.GetGroupResponse(
            inconsistent=len({m.subscriptions for m in members}) > 1,
            members=[
                broker_pb2.GroupMember(
                    client_id=m.client_id,
                    model=m.model,
                    subscriptions=[
                        broker_pb2.ConsumerSubscription(topic=t, expression=e, expression_type=k)
                        for t, e, k in m.subscriptions
                    ],
                    excluded=m.client_id not in sharing,
                )
                for m in members
            ],
        )
        if config is not None:
            response.settings.CopyFrom(group_settings.settings_message(config))
        return response

    async def upsert_topic(self, request: broker_pb2.UpsertTopicRequest) -> TopicConfig:
        """Create or change a topic, save it and register it everywhere."""
        self._require_master("create and change topics")
        wire = request.topic
        name = check_topic("topic.name", wire.name)
        if self._topics.is_system(name):
            raise FailedPrecondition(f"topic.name: {name} is a system topic; it cannot be changed")
        limit = self._config.max_topic_queue_nums
        for field in ("read_queue_nums", "write_queue_nums"):
            value = getattr(wire, field)
            if not 1 <= value <= limit:
                raise InvalidArgument(f"topic.{field}: must be between 1 and {limit}, got {value}")
        if not 0 <= wire.perm <= PERM_ALL:
            raise InvalidArgument(
                f"topic.perm: must be a combination of READ 4, WRITE 2 and "
                f"INHERIT 1, got {wire.perm}"
            )
        config = TopicConfig(
            name, wire.read_queue_nums, wire.write_queue_nums, wire.perm, wire.order
        )
        if self._topics.get(name) != config:
            self._topics.upsert(config)
            await self._publisher.publish()
        return config

    async def delete_topic(self, request: broker_pb2.DeleteTopicRequest) -> None:
        """Forget a topic, its consumer offsets and POP state (the store keeps its messages
        until cleanup)."""
        self._require_master("delete topics")
        name = check_topic("topic", request.topic)
        if self._topics.is_system(name):
            raise FailedPrecondition(f"topic: {name} is a system topic; it cannot be deleted")
        if not self._topics.delete(name):
            raise NotFound(f"topic: topic {name!r} does not exist")
        self._offsets.delete_topic(name)
        self._pop_state.delete_topic(name)
        await self._publisher.publish()

    def list_topics(self) -> list[TopicConfig]:
        """Every topic, sorted by name."""
        return self._topics.all()

    async def topic_status(
        self, request: broker_pb2.TopicStatusRequest
    ) -> list[store_pb2.QueueInfo]:
        """Min and max offsets of every queue of a topic (0/0 for queues not yet written)."""
        name = check_topic("topic", request.topic)
        config = self._topics.get(name)
        if config is None:
            raise NotFound(f"topic: topic {name!r} does not exist")
        stored = {q.queue_id: q for q in await self._store.list_queues(name)}
        count = max(
            [
                config.read_queue_nums,
                config.write_queue_nums,
                *(queue_id + 1 for queue_id in stored),
            ]
        )
        return [
            stored.get(qid) or store_pb2.QueueInfo(topic=name, queue_id=qid) for qid in range(count)
        ]

    def list_groups(self) -> list[broker_pb2.GroupInfo]:
        """Every group known from settings, offsets or live heartbeats."""
        names = set(self._groups.names()) | self._offsets.groups()
        names |= set(self._clients.consumer_groups())
        groups = []
        for name in sorted(names):
            live = self._clients.consumer_group(name)
            settings = self._groups.get(name)
            orderly = live.orderly if live else bool(settings and settings.consume_message_orderly)
            groups.append(
                broker_pb2.GroupInfo(
                    group=name,
                    client_ids=live.client_ids if live else (),
                    model=live.model if live else "",
                    orderly=orderly,
                )
            )
        return groups

    async def group_progress(
        self, request: broker_pb2.GroupProgressRequest
    ) -> list[broker_pb2.QueueProgress]:
        """Per queue of every topic the group commits on or subscribes to: max, committed, lag."""
        group = check_group("group", request.group)
        committed = self._offsets.offsets_of_group(group)
        live = self._clients.consumer_group(group)
        topics = set(committed) | {s[0] for s in (live.subscriptions if live else ())}
        if not topics and self._groups.get(group) is None:
            raise NotFound(f"group: consumer group {group!r} is unknown")
        progress: list[broker_pb2.QueueProgress] = []
        for topic in sorted(t for t in topics if self._topics.get(t) is not None):
            queues = await self.topic_status(broker_pb2.TopicStatusRequest(topic=topic))
            progress.extend(_queue_progress(q, committed.get(topic, {})) for q in queues)
        return progress

    async def view_message(self, request: store_pb2.GetRequest) -> store_pb2.GetResponse:
        """One message by commitlog offset or message id."""
        which = request.WhichOneof("by")
        if which is None:
            raise InvalidArgument("by: set commitlog_offset or msg_id")
        if which == "commitlog_offset" and request.commitlog_offset < 0:
            raise InvalidArgument("commitlog_offset: must not be negative")
        if which == "msg_id" and not request.msg_id:
            raise InvalidArgument("msg_id: must not be empty")
        return await self._store.get(request)

    async def query_by_key(
        self, request: store_pb2.QueryByKeyRequest
    ) -> store_pb2.QueryByKeyResponse:
        """Messages of a topic with a key, newest first, at most ``max_query_messages``."""
        name = check_topic("topic", request.topic)
        if self._topics.get(name) is None:
            raise NotFound(f"topic: topic {name!r} does not exist")
        if not request.key:
            raise InvalidArgument("key: must not be empty")
        if request.max_count < 0 or request.begin_ms < 0 or request.end_ms < 0:
            raise InvalidArgument("max_count, begin_ms, end_ms: must not be negative")
        limit = self._config.max_query_messages
        forwarded = store_pb2.QueryByKeyRequest()
        forwarded.CopyFrom(request)
        forwarded.max_count = min(request.max_count or limit, limit)
        return await self._store.query_by_key(forwarded)


def _queue_progress(
    queue: store_pb2.QueueInfo, committed: dict[int, int]
) -> broker_pb2.QueueProgress:
    consumer_offset = committed.get(queue.queue_id, -1)
    # No commit yet: the group would start from the queue's first message.
    start = consumer_offset if consumer_offset >= 0 else queue.min_offset
    return broker_pb2.QueueProgress(
        topic=queue.topic,
        queue_id=queue.queue_id,
        broker_offset=queue.max_offset,
        consumer_offset=consumer_offset,
        lag=max(0, queue.max_offset - start),
    )


def _counts_message(counts: Counts) -> broker_pb2.TrafficCounts:
    return broker_pb2.TrafficCounts(last_minute=counts.last_minute, last_hour=counts.last_hour)


def _traffic_message(traffic: Traffic) -> broker_pb2.GetTrafficStatsResponse:
    return broker_pb2.GetTrafficStatsResponse(
        produced=_counts_message(traffic.produced),
        consumed=_counts_message(traffic.consumed),
        parts=[
            broker_pb2.TrafficPart(name=name, consumed=_counts_message(counts))
            for name, counts in traffic.parts
        ],
    )
