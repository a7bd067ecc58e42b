"""Consumer-group settings (subscriptionGroup.json).

A group is created with RocketMQ's defaults the first time the broker sees it
(when ``auto_create_subscription_group`` is on); an admin creates, changes and
deletes groups live (``boltmq admin group``; what each setting does, and which
values are refused, is in :mod:`services.broker.admin.group_settings`). The file
keeps RocketMQ's names::

    {"subscriptionGroupTable": {"G": {"groupName": "G", "consumeEnable": true, ...}},
     "dataVersion": {"timestamp": 1700000000000, "counter": 2}}
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from boltmq.wire.topic import is_group
from services.broker.errors import CorruptMetadata
from services.broker.metadata import json_document
from services.broker.metadata.clock import Clock, wall_clock_ms
from services.broker.metadata.names import dropped_at_load
from services.broker.metadata.topic_config import DataVersion

SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"

_JSON_NAMES = {
    "group_name": "groupName",
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "consume_message_orderly": "consumeMessageOrderly",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
}


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group's settings (RocketMQ's SubscriptionGroupConfig)."""

    group_name: str
    consume_enable: bool = True
    """False: pulls of the group are refused."""
    consume_from_min_enable: bool = True
    """A new group may start from the queue's min offset."""
    consume_broadcast_enable: bool = True
    """The group may consume in BROADCASTING mode."""
    consume_message_orderly: bool = False
    """The group consumes orderly (queue locks)."""
    retry_queue_nums: int = 1
    """Queues of %RETRY%<group>."""
    retry_max_times: int = 16
    """Deliveries before a message goes to %DLQ%<group>."""
    broker_id: int = 0
    """Broker id the group reads from normally."""
    which_broker_when_consume_slowly: int = 1
    """Broker id the group reads from when it lags."""
    notify_consumer_ids_changed_enable: bool = True
    """Tell members when the member list changes."""

    def to_dict(self) -> dict[str, Any]:
        """The subscriptionGroup.json entry."""
        return {_JSON_NAMES[f.name]: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, entry: object) -> SubscriptionGroupConfig:
        """Parse one entry; missing settings take their defaults."""
        if not isinstance(entry, dict):
            raise CorruptMetadata(f"{SUBSCRIPTION_GROUP_FILE}: entry is not an object")
        name = entry.get("groupName")
        if not isinstance(name, str) or not is_group(name):
            raise CorruptMetadata(f"{SUBSCRIPTION_GROUP_FILE}: bad groupName {name!r:.80}")
        values: dict[str, Any] = {"group_name": name}
        for field in fields(cls):
            key = _JSON_NAMES[field.name]
            if field.name == "group_name" or key not in entry:
                continue
            value = entry[key]
            expected = bool if isinstance(field.default, bool) else int
            if type(value) is not expected:
                raise CorruptMetadata(
                    f"{SUBSCRIPTION_GROUP_FILE}: group {name}: {key} is not a {expected.__name__}"
                )
            values[field.name] = value
        return cls(**values)


class SubscriptionGroupManager:
    """The table of consumer groups with their settings."""

    def __init__(self, auto_create: bool, clock_ms: Clock = wall_clock_ms) -> None:
        self._auto_create = auto_create
        self._clock_ms = clock_ms
        self._groups: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion(clock_ms(), 0)

    @property
    def auto_create(self) -> bool:
        """True when unknown groups are created on first use."""
        return self._auto_create

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, or None when unknown."""
        return self._groups.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, creating them with defaults when auto-creation is on."""
        config = self._groups.get(group)
        if config is None and self._auto_create:
            config = self.upsert(SubscriptionGroupConfig(group))
        return config

    def upsert(self, config: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        """Create or replace a group's settings."""
        if self._groups.get(config.group_name) != config:
            self._groups[config.group_name] = config
            self.data_version = self.data_version.next(self._clock_ms())
        return config

    def delete(self, group: str) -> bool:
        """Forget a group; False when it was unknown."""
        if self._groups.pop(group, None) is None:
            return False
        self.data_version = self.data_version.next(self._clock_ms())
        return True

    def names(self) -> list[str]:
        """Every known group, sorted."""
        return sorted(self._groups)

    def to_json(self) -> bytes:
        """subscriptionGroup.json as written to the store."""
        table = {name: self._groups[name].to_dict() for name in sorted(self._groups)}
        return json_document.dump(
            {"subscriptionGroupTable": table, "dataVersion": self.data_version.to_dict()}
        )

    def load_json(self, data: bytes) -> None:
        """Replace the table with the file's content."""
        file = SUBSCRIPTION_GROUP_FILE
        document = json_document.parse_object(file, data)
        table = json_document.get_object(file, document, "subscriptionGroupTable")
        groups = [
            SubscriptionGroupConfig.from_dict(entry)
            for entry in table.values()
            if not (
                isinstance(entry, dict) and dropped_at_load(file, "group", entry.get("groupName"))
            )
        ]
        self._groups = {g.group_name: g for g in groups}
        version = json_document.get_object(file, document, "dataVersion")
        self.data_version = DataVersion(
            json_document.get_int(file, version, "timestamp"),
            json_document.get_int(file, version, "counter"),
        )
