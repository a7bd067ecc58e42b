"""The MQTT 3.1.1 codec: 3.1.1 bytes decoded through ``mqtt5``, answers encoded back."""

from __future__ import annotations

import mqtt5
import pytest

from services.mqtt import mqtt311
from tests.integration.mqtt.raw_client import connect_311


def test_a_connect_with_will_and_account_decodes() -> None:
    data = connect_311("dev-1", user="u", password="p", clean=False, will=("w/t", b"bye", 1))
    packet, size = mqtt311.read(data + b"\xc0\x00")  # a PINGREQ after it is left
    assert size == len(data)
    assert isinstance(packet, mqtt5.ConnectPacket)
    assert (packet.client_id, packet.username, packet.password) == ("dev-1", "u", b"p")
    assert not packet.clean_start and packet.keep_alive == 60
    assert packet.will is not None
    assert (packet.will.topic, packet.will.payload, int(packet.will.qos)) == ("w/t", b"bye", 1)


def test_publish_subscribe_unsubscribe_decode() -> None:
    publish, _ = mqtt311.read(b"\x32\x09\x00\x03a/b\x00\x07hi")
    assert isinstance(publish, mqtt5.PublishPacket)
    assert (publish.topic, publish.payload, publish.packet_id) == ("a/b", b"hi", 7)
    subscribe, _ = mqtt311.read(mqtt311.frame(0x82, b"\x00\x05\x00\x03a/#\x01"))
    assert isinstance(subscribe, mqtt5.SubscribePacket)
    assert [(f.pattern, int(f.max_qos)) for f in subscribe.topic_filters] == [("a/#", 1)]
    unsubscribe, _ = mqtt311.read(mqtt311.frame(0xA2, b"\x00\x06\x00\x03a/#"))
    assert isinstance(unsubscribe, mqtt5.UnsubscribePacket)
    assert unsubscribe.patterns == ["a/#"]


@pytest.mark.parametrize(
    "data",
    [
        connect_311("x")[:-1],  # cut short
        b"\x32",  # no remaining length yet
        b"\x30\x80",  # remaining length goes on
    ],
)
def test_an_incomplete_packet_waits_for_more(data: bytes) -> None:
    with pytest.raises(IndexError):
        mqtt311.read(data)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (mqtt311.frame(0x10, b"\x00\x04MQTT\x05\x02\x00\x3c\x00\x00"), "protocol version"),
        (mqtt311.frame(0x10, b"\x00\x04MQTT\x04\x42\x00\x3c\x00\x00\x00\x01p"), "password"),
        (mqtt311.frame(0x82, b"\x00\x01\x00\x03a/b\x04"), "options"),
        (b"\xf0\x00", "not MQTT 3.1.1"),
        (b"\x40\x03\x00\x01\x00", "length"),
        (b"\x30\xff\xff\xff\xff\x01", "remaining length"),
        (b"\x30\x03\x00\x05a", "truncated"),
    ],
)
def test_a_malformed_packet_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        mqtt311.read(data)


def test_answers_are_311_packets() -> None:
    publish = mqtt5.PublishPacket(
        "a/b", b"xy", qos=mqtt5.QoS.AT_LEAST_ONCE, packet_id=7, message_expiry_interval=5
    )
    assert mqtt311.write(publish) == b"\x32\x09\x00\x03a/b\x00\x07xy"  # no properties
    assert mqtt311.write(mqtt5.PubAckPacket(3)) == b"\x40\x02\x00\x03"
    codes = [mqtt5.SubAckReasonCode(1), mqtt5.SubAckReasonCode.NOT_AUTHORIZED]
    assert mqtt311.write(mqtt5.SubAckPacket(3, codes)) == b"\x90\x04\x00\x03\x01\x80"
    success = [mqtt5.UnsubAckReasonCode.SUCCESS]
    assert mqtt311.write(mqtt5.UnsubAckPacket(3, success)) == b"\xb0\x02\x00\x03"
    assert mqtt311.write(mqtt5.PingRespPacket()) == b"\xd0\x00"
    assert mqtt311.write(mqtt5.DisconnectPacket()) == b""
    code = mqtt5.ConnAckReasonCode
    assert mqtt311.write(mqtt5.ConnAckPacket(session_present=True)) == b"\x20\x02\x01\x00"
    refused = mqtt5.ConnAckPacket(reason_code=code.BAD_USER_NAME_OR_PASSWORD)
    assert mqtt311.write(refused) == b"\x20\x02\x00\x04"
    assert mqtt311.write(mqtt5.ConnAckPacket(reason_code=code.TOPIC_NAME_INVALID)) == b""
