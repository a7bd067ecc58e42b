"""UpsertGroup's settings: named fields change, the rest are kept, unusable values refused."""

from __future__ import annotations

import pytest

from boltmq.v1 import broker_pb2
from services.broker.admin.group_settings import settings_message, updated
from services.broker.errors import InvalidArgument
from services.broker.metadata.subscription_group import SubscriptionGroupConfig

MAX_QUEUES = 64


def test_named_settings_change_and_the_others_are_kept() -> None:
    current = SubscriptionGroupConfig("g", retry_max_times=5, retry_queue_nums=2)
    request = broker_pb2.UpsertGroupRequest(group="g", consume_enable=False)
    config = updated(current, request, MAX_QUEUES)
    assert (config.consume_enable, config.retry_max_times, config.retry_queue_nums) == (
        False,
        5,
        2,
    )
    message = settings_message(config)
    assert message.group == "g" and not message.consume_enable and message.retry_max_times == 5


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"retry_max_times": 0}, "retry_max_times"),
        ({"retry_max_times": 1001}, "retry_max_times"),
        ({"retry_queue_nums": 0}, "retry_queue_nums"),
        ({"retry_queue_nums": MAX_QUEUES + 1}, "retry_queue_nums"),
        ({"broker_id": 1}, "broker_id"),
        ({"which_broker_when_consume_slowly": 2}, "which_broker_when_consume_slowly"),
        ({"consume_from_min_enable": False}, "consume_from_min_enable"),
    ],
)
def test_values_the_broker_cannot_act_on_are_refused(fields: dict[str, object], error: str) -> None:
    request = broker_pb2.UpsertGroupRequest(group="g", **fields)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=error):
        updated(SubscriptionGroupConfig("g"), request, MAX_QUEUES)
