"""Topic configurations: the system topics, auto-creation from TBW102, and topics.json.

The table is pure state; the broker persists :meth:`TopicConfigManager.to_json`
through the store and registers the table with the registries after every
change. Every change bumps a :class:`DataVersion` (wall-clock timestamp plus a
counter), which registries use to tell an old table from a new one.

``topics.json`` (RocketMQ's field names, so operators recognise the file)::

    {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4,
                                "writeQueueNums": 4, "perm": 6, "order": false}},
     "dataVersion": {"timestamp": 1700000000000, "counter": 3}}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from boltmq.wire.topic import is_topic
from services.broker.errors import CorruptMetadata
from services.broker.metadata import json_document
from services.broker.metadata.clock import Clock, wall_clock_ms
from services.broker.metadata.names import check_topic, dropped_at_load

PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_ALL = PERM_READ | PERM_WRITE | PERM_INHERIT
PERM_READ_WRITE = PERM_READ | PERM_WRITE

AUTO_CREATE_TEMPLATE_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""Half (prepared) transaction messages; only the broker reads and writes it."""
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
"""Decisions and checks of half messages; only the broker reads and writes it."""
BROKER_TOPICS = frozenset(
    (AUTO_CREATE_TEMPLATE_TOPIC, SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC)
)
"""Topics only the broker writes: TBW102 is a template, the schedule topic holds delay
messages, the transaction topics half messages and their decisions."""
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"
"""``<cluster>_REPLY_TOPIC`` carries replies of request-reply to their requesters."""
TEMPLATE_QUEUE_NUMS = 8
"""Queues of TBW102, so the most an auto-created topic can get (RocketMQ's default)."""
SCHEDULE_QUEUE_NUMS = 18
"""One queue per delay level (:mod:`services.broker.delay.delay_level`)."""
CLUSTER_TOPIC_QUEUE_NUMS = 16
"""RocketMQ's TopicConfig default, which the cluster-name topic keeps."""

TOPICS_FILE = "topics.json"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic as this broker serves it."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    """READ 4 | WRITE 2 | INHERIT 1 (a template whose settings new topics inherit)."""
    order: bool = False
    """Messages of one sharding key are kept in order (a hint for clients)."""

    @property
    def readable(self) -> bool:
        """Consumers may pull from the topic."""
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        """Producers may send to the topic."""
        return bool(self.perm & PERM_WRITE)

    @property
    def inheritable(self) -> bool:
        """New topics may be created from this one (TBW102)."""
        return bool(self.perm & PERM_INHERIT)

    def to_dict(self) -> dict[str, Any]:
        """The topics.json entry."""
        return {
            "topicName": self.name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "order": self.order,
        }

    @classmethod
    def from_dict(cls, entry: object) -> TopicConfig:
        """Parse one topics.json entry; raise CorruptMetadata when it is not one."""
        if not isinstance(entry, dict):
            raise CorruptMetadata(f"{TOPICS_FILE}: topic entry is not an object: {entry!r:.80}")
        name = entry.get("topicName")
        if not isinstance(name, str) or not is_topic(name):
            raise CorruptMetadata(f"{TOPICS_FILE}: bad topicName {name!r:.80}")
        read, write, perm = (
            json_document.get_int(f"{TOPICS_FILE}: topic {name}", entry, key, -1)
            for key in ("readQueueNums", "writeQueueNums", "perm")
        )
        if min(read, write, perm) < 0:
            raise CorruptMetadata(
                f"{TOPICS_FILE}: topic {name}: readQueueNums, writeQueueNums "
                f"and perm must be present and non-negative"
            )
        return cls(name, read, write, perm, bool(entry.get("order", False)))


@dataclass(frozen=True, slots=True)
class DataVersion:
    """When and how often the topic table changed."""

    timestamp_ms: int = 0
    counter: int = 0

    def next(self, now_ms: int) -> DataVersion:
        """The version after one more change."""
        return DataVersion(now_ms, self.counter + 1)

    def to_dict(self) -> dict[str, int]:
        """The ``dataVersion`` object of a metadata file."""
        return {"timestamp": self.timestamp_ms, "counter": self.counter}


def system_topics(
    cluster_name: str, broker_name: str, auto_create_enable: bool
) -> list[TopicConfig]:
    """The topics every broker creates on start (RocketMQ's TopicConfigManager constructor)."""
    topics = [
        TopicConfig(SELF_TEST_TOPIC, 1, 1),
        TopicConfig(cluster_name, CLUSTER_TOPIC_QUEUE_NUMS, CLUSTER_TOPIC_QUEUE_NUMS, PERM_ALL),
        TopicConfig(broker_name, 1, 1, PERM_ALL),
        TopicConfig(OFFSET_MOVED_EVENT_TOPIC, 1, 1),
        TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS),
        # Perm 0: the broker reaches them through the store; clients never pull or send.
        TopicConfig(TRANS_HALF_TOPIC, 1, 1, 0),
        TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1, 0),
        TopicConfig(cluster_name + REPLY_TOPIC_SUFFIX, 1, 1),
    ]
    # TBW102 only when auto-creation is on: registries route producers of unknown topics
    # to brokers that serve TBW102, so announcing it without honouring it would misroute them.
    if auto_create_enable:
        topics.append(
            TopicConfig(
                AUTO_CREATE_TEMPLATE_TOPIC, TEMPLATE_QUEUE_NUMS, TEMPLATE_QUEUE_NUMS, PERM_ALL
            )
        )
    return topics


class TopicConfigManager:
    """The broker's topic table: lookups, upserts, deletes, auto-creation, JSON."""

    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        auto_create_enable: bool,
        clock_ms: Clock = wall_clock_ms,
    ) -> None:
        self._clock_ms = clock_ms
        self._auto_create_enable = auto_create_enable
        defaults = system_topics(cluster_name, broker_name, auto_create_enable)
        self._system_names = frozenset([t.name for t in defaults] + [AUTO_CREATE_TEMPLATE_TOPIC])
        self._topics: dict[str, TopicConfig] = {t.name: t for t in defaults}
        self.data_version = DataVersion(clock_ms(), 0)

    def get(self, name: str) -> TopicConfig | None:
        """The topic's configuration, or None when this broker does not serve it."""
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        """Every topic, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def is_system(self, name: str) -> bool:
        """True for the topics the broker creates itself (never upserted or deleted)."""
        return name in self._system_names

    def upsert(self, config: TopicConfig) -> TopicConfig:
        """Create or replace a topic; the version changes only when something did.

        The name is checked here, whatever made it (a request, a group's ``%RETRY%`` or
        ``%DLQ%`` topic), so no name the registry or the store would refuse is ever kept."""
        check_topic("topic", config.name)
        if self._topics.get(config.name) != config:
            self._topics[config.name] = config
            self._bump()
        return config

    def delete(self, name: str) -> bool:
        """Remove a topic; False when it did not exist."""
        if self._topics.pop(name, None) is None:
            return False
        self._bump()
        return True

    def create_from_template(self, name: str, requested_queue_nums: int) -> TopicConfig | None:
        """Create ``name`` from TBW102 (queues: min of requested and template), or None.

        None means auto-creation is impossible: TBW102 is absent or lost its
        INHERIT bit. An existing topic is returned unchanged.
        """
        existing = self._topics.get(name)
        if existing is not None:
            return existing
        template = self._topics.get(AUTO_CREATE_TEMPLATE_TOPIC)
        if template is None or not template.inheritable:
            return None
        queue_nums = max(1, min(requested_queue_nums, template.write_queue_nums))
        return self.upsert(
            TopicConfig(name, queue_nums, queue_nums, template.perm & ~PERM_INHERIT, template.order)
        )

    def _bump(self) -> None:
        self.data_version = self.data_version.next(self._clock_ms())

    def to_json(self) -> bytes:
        """topics.json as written to the store."""
        table = {name: self._topics[name].to_dict() for name in sorted(self._topics)}
        return json_document.dump(
            {"topicConfigTable": table, "dataVersion": self.data_version.to_dict()}
        )

    def load_json(self, data: bytes) -> None:
        """Overlay topics.json on the system topics (the file wins, as in RocketMQ)."""
        document = json_document.parse_object(TOPICS_FILE, data)
        table = json_document.get_object(TOPICS_FILE, document, "topicConfigTable")
        self._load_entries(table.values())
        version = json_document.get_object(TOPICS_FILE, document, "dataVersion")
        self.data_version = DataVersion(
            json_document.get_int(TOPICS_FILE, version, "timestamp"),
            json_document.get_int(TOPICS_FILE, version, "counter"),
        )
        if not self._auto_create_enable:
            self._topics.pop(AUTO_CREATE_TEMPLATE_TOPIC, None)

    def _load_entries(self, entries: Iterable[object]) -> None:
        for entry in entries:
            if isinstance(entry, dict) and dropped_at_load(
                TOPICS_FILE, "topic", entry.get("topicName")
            ):
                continue
            config = TopicConfig.from_dict(entry)
            self._topics[config.name] = config
