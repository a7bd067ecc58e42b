"""Delay levels, delay offsets and the schedule-queue conversions (pure parts)."""

from __future__ import annotations

import pytest

from boltmq.kernel.config import ConfigError
from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.record import SCHEDULE_TOPIC
from boltmq.wire.record_batch import encode_send_record
from services.broker.config import BrokerConfig
from services.broker.delay.delay_level import DelayLevels, InvalidDelayLevels, parse_delay_levels
from services.broker.delay.delay_message import (
    due_ms,
    first_hop,
    next_copy,
    records_as_messages,
    schedule,
)
from services.broker.errors import CorruptMetadata, InvalidArgument
from services.broker.metadata.delay_offset import DelayOffsetManager

LEVELS = DelayLevels.parse("100ms 1s 1m")


def test_default_levels_are_rocketmqs() -> None:
    levels = DelayLevels.parse(BrokerConfig().message_delay_level)
    assert levels.count == 18
    assert levels.delay_ms(1) == 1_000 and levels.delay_ms(5) == 60_000
    assert levels.delay_ms(18) == 7_200_000 and levels.delay_ms(40) == 7_200_000


@pytest.mark.parametrize("text", ["", "1x", "5s 1s", "0s", "1s " * 19, "-1s", "1.5s"])
def test_bad_level_tables_are_refused(text: str) -> None:
    with pytest.raises(InvalidDelayLevels):
        parse_delay_levels(text)
    with pytest.raises(ConfigError):
        BrokerConfig(message_delay_level=text)


def test_hops_take_the_largest_level_that_fits() -> None:
    assert LEVELS.hop(50) == (1, 50)  # below the first level: the rest itself
    assert LEVELS.hop(100) == (1, 100)
    assert LEVELS.hop(999) == (1, 100)
    assert LEVELS.hop(1_500) == (2, 1_000)
    assert LEVELS.hop(3_600_000) == (3, 60_000)


def test_first_hop_checks_levels_and_times() -> None:
    now = 1_000_000
    hop = lambda props: first_hop("f", props, LEVELS, now, 10_000, 1_000)  # noqa: E731
    assert hop({"DELAY": "2"}) == (2, 1_000)
    assert hop({"TIMER_DELIVER_MS": str(now + 1_500)}) == (2, 1_000)
    assert hop({"TIMER_DELIVER_MS": str(now - 500)}) is None  # clock skew: now
    for props, fragment in [
        ({"DELAY": "4"}, "not 1..3"),
        ({"DELAY": "0"}, "not 1..3"),
        ({"DELAY": "x"}, "integer"),
        ({"DELAY": "1", "TIMER_DELIVER_MS": "5"}, "not both"),
        ({"TIMER_DELIVER_MS": str(now - 5_000)}, "in the past"),
        ({"TIMER_DELIVER_MS": str(now + 20_000)}, "ahead"),
    ]:
        with pytest.raises(InvalidArgument, match=fragment):
            hop(props)


def _entry(message: message_pb2.Message, store_ms: int, offset: int) -> message_pb2.MessageExt:
    return message_pb2.MessageExt(
        topic=message.topic,
        queue_id=message.queue_id,
        queue_offset=offset,
        body=message.body,
        properties=dict(message.properties),
        store_timestamp_ms=store_ms,
    )


def test_schedule_then_deliver_restores_the_message() -> None:
    message = message_pb2.Message(topic="T", queue_id=3, body=b"b", properties={"a": "1"})
    schedule(message, 2, 1_000)
    assert (message.topic, message.queue_id) == (SCHEDULE_TOPIC, 1)
    assert message.properties["REAL_TOPIC"] == "T" and message.properties["DELAY_MS"] == "1000"
    uniq = message.properties["UNIQ_KEY"]
    entry = _entry(message, 5_000, 7)
    assert due_ms(entry) == 6_000
    real = next_copy(entry, LEVELS, 6_000)
    assert (real.topic, real.queue_id, real.body) == ("T", 3, b"b")
    assert dict(real.properties) == {"a": "1", "UNIQ_KEY": uniq, "SCHEDULE_SOURCE": "1:7"}


def test_deliver_at_hops_until_due() -> None:
    message = message_pb2.Message(
        topic="T", queue_id=0, body=b"b", properties={"TIMER_DELIVER_MS": "3500"}
    )
    schedule(message, 2, 1_000)
    hop = next_copy(_entry(message, 1_000, 0), LEVELS, 2_000)  # 1.5 s left
    assert hop.topic == SCHEDULE_TOPIC and hop.properties["DELAY"] == "2"
    step = next_copy(_entry(hop, 3_000, 0), LEVELS, 3_000)  # 0.5 s left: level 1, 100 ms
    assert step.properties["DELAY"] == "1" and step.properties["DELAY_MS"] == "100"
    last = next_copy(_entry(step, 3_450, 1), LEVELS, 3_450)  # 50 ms left: that exactly
    assert last.properties["DELAY"] == "1" and last.properties["DELAY_MS"] == "50"
    real = next_copy(_entry(last, 3_450, 2), LEVELS, 3_500)
    assert real.topic == "T" and "TIMER_DELIVER_MS" not in real.properties


def test_raw_records_are_decoded_only_when_one_is_delayed() -> None:
    plain = encode_send_record("T", b"x", "t", None, {"k": "v"})
    request = broker_pb2.SendRequest(records=plain, record_count=1, topic="T", queue_id=-1)
    assert records_as_messages(request, plain) is None
    # a body containing the marker bytes is not a delayed message
    tricky = encode_send_record("T", b"DELAY\x01", "t")
    assert records_as_messages(request, tricky) is None
    delayed = plain + encode_send_record("T", b"y", None, ["k1"], {"DELAY": "1"})
    converted = records_as_messages(
        broker_pb2.SendRequest(records=delayed, record_count=2, topic="T", queue_id=-1), delayed
    )
    assert converted is not None
    assert [m.body for m in converted.messages] == [b"x", b"y"]
    assert converted.messages[1].properties["DELAY"] == "1"
    with pytest.raises(InvalidArgument, match="records"):
        records_as_messages(broker_pb2.SendRequest(record_count=3), delayed)


def test_delay_offsets_round_trip_and_refuse_garbage() -> None:
    offsets = DelayOffsetManager()
    offsets.advance(3, 12)
    offsets.advance(1, 4)
    again = DelayOffsetManager()
    again.load_json(offsets.to_json())
    assert (again.get(1), again.get(3), again.get(2)) == (4, 12, 0)
    for bad in (
        b"[]",
        b'{"offsetTable": {"x": 1}}',
        b'{"offsetTable": {"1": -1}}',
        b'{"offsetTable": {"1": "2"}}',
    ):
        with pytest.raises(CorruptMetadata):
            DelayOffsetManager().load_json(bad)
