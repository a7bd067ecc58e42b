"""A consumer group's settings as the admin RPCs change and show them.

``UpsertGroup`` sets the fields the request names and keeps the others
(RocketMQ's defaults for a new group). Every stored setting either takes
effect or is refused when set to anything but the value the broker acts on:

=============================== ==================================================
consume_enable                  false: pulls of the group are refused
                                (PERMISSION_DENIED; a parked pull too, when it wakes)
consume_broadcast_enable        false: BROADCASTING heartbeats of the group refused
retry_max_times (1..1000)       send-backs past it go to ``%DLQ%<group>``
retry_queue_nums                queues of ``%RETRY%<group>`` (resized when it exists:
                                its write queues follow, read queues never shrink so
                                pending retries stay readable)
consume_message_orderly         reported by ``group list`` (the consumer's listener
                                decides how it consumes)
consume_from_min_enable         only true: where a group without committed offsets
                                starts is the consumer's choice
broker_id                       only 0: pulls go to the master
which_broker_when_consume_slowly only 1: a lagging group is sent to a replica when the
                                master has ``slave_read_enable``; the SDK picks the
                                group's lowest replica id, the broker names none
notifyConsumerIdsChangedEnable  not settable: members see membership changes at their
                                next rebalance (nothing is pushed to them)
=============================== ==================================================
"""

from __future__ import annotations

import dataclasses
from typing import Any

from boltmq.v1 import broker_pb2
from services.broker.errors import InvalidArgument
from services.broker.metadata.subscription_group import SubscriptionGroupConfig

RETRY_MAX_TIMES_LIMIT = 1000
"""Largest retry_max_times (RocketMQ's admin tools allow any; 1000 retries is days)."""

_FIXED = {
    "consume_from_min_enable": (
        True,
        "where a group without committed offsets starts is chosen by its consumers "
        "(consume_from_where), not by the broker",
    ),
    "broker_id": (0, "pulls of a group go to its broker group's master (broker id 0)"),
    "which_broker_when_consume_slowly": (
        1,
        "a lagging group is sent to a replica only when the master has slave_read_enable, "
        "and the SDK then reads from the group's lowest replica id; the broker names none",
    ),
}
"""Settings this broker cannot act on: the one value accepted, and why."""

_SETTINGS = (
    "consume_enable",
    "consume_broadcast_enable",
    "consume_from_min_enable",
    "consume_message_orderly",
    "retry_queue_nums",
    "retry_max_times",
    "broker_id",
    "which_broker_when_consume_slowly",
)


def updated(
    current: SubscriptionGroupConfig, request: broker_pb2.UpsertGroupRequest, max_queues: int
) -> SubscriptionGroupConfig:
    """``current`` with the settings ``request`` names; InvalidArgument naming the field
    when a value is out of range or one the broker cannot act on."""
    changes: dict[str, Any] = {}
    for name in _SETTINGS:
        if request.HasField(name):  # type: ignore[arg-type]  # every name is an optional field
            changes[name] = getattr(request, name)
    for name, (accepted, why) in _FIXED.items():
        if name in changes and changes[name] != accepted:
            raise InvalidArgument(f"{name}: only {accepted!r} is accepted ({why})")
    retry_max = changes.get("retry_max_times", 1)
    if not 1 <= retry_max <= RETRY_MAX_TIMES_LIMIT:
        raise InvalidArgument(
            f"retry_max_times: must be between 1 and {RETRY_MAX_TIMES_LIMIT}, got {retry_max}"
        )
    queues = changes.get("retry_queue_nums", 1)
    if not 1 <= queues <= max_queues:
        raise InvalidArgument(
            f"retry_queue_nums: must be between 1 and {max_queues} (max_topic_queue_nums), "
            f"got {queues}"
        )
    return dataclasses.replace(current, **changes)


def settings_message(config: SubscriptionGroupConfig) -> broker_pb2.GroupSettings:
    """The group's settings as the RPCs answer them."""
    return broker_pb2.GroupSettings(
        group=config.group_name, **{name: getattr(config, name) for name in _SETTINGS}
    )
