"""Delivery: one application message between MQTT and BoltMQ, both ways.

A PUBLISH becomes a BoltMQ :class:`~boltmq.message.Message` on the topic's first level
(:mod:`services.mqtt.topics`) with these properties (all strings):

| Property | Value |
|---|---|
| ``MQTT_TOPIC`` | the full MQTT topic |
| ``MQTT_QOS`` | ``0`` or ``1`` |
| ``MQTT_EXPIRES_AT_MS`` | epoch ms past which it is not delivered (Message Expiry Interval) |
| ``MQTT_CONTENT_TYPE`` | MQTT 5 Content Type, when given |
| ``MQTT_PAYLOAD_FORMAT`` | ``1`` for a UTF-8 payload (Payload Format Indicator), when given |
| ``MQTT_EMPTY`` | ``1``: the payload is empty (a BoltMQ body is never empty: it holds one 0 byte) |

A message an SDK producer sent has none of them: its MQTT topic is its BoltMQ topic, or
the ``MQTT_TOPIC`` property the producer set (it must then start with the BoltMQ topic's
name as its first level), and its QoS is 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from boltmq.message import Message, ReceivedMessage
from services.mqtt.topics import (
    PROPERTY_CONTENT_TYPE,
    PROPERTY_EMPTY,
    PROPERTY_EXPIRES_AT,
    PROPERTY_PAYLOAD_FORMAT,
    PROPERTY_QOS,
    PROPERTY_TOPIC,
    tag_of,
)


@dataclass(frozen=True)
class Delivery:
    """An application message on its way to devices."""

    topic: str
    payload: bytes
    qos: int
    expires_at_ms: int = 0
    """0: never."""
    content_type: str | None = None
    payload_format: int = 0

    def expired(self, now_ms: int | None = None) -> bool:
        if not self.expires_at_ms:
            return False
        return (now_ms if now_ms is not None else int(time.time() * 1000)) >= self.expires_at_ms

    def expiry_left_s(self) -> int | None:
        """What is left of the Message Expiry Interval (None: none was set)."""
        if not self.expires_at_ms:
            return None
        return max(1, -(-(self.expires_at_ms - int(time.time() * 1000)) // 1000))

    def to_message(self, boltmq_topic: str) -> Message:
        properties = {PROPERTY_TOPIC: self.topic, PROPERTY_QOS: str(self.qos)}
        if self.expires_at_ms:
            properties[PROPERTY_EXPIRES_AT] = str(self.expires_at_ms)
        if self.content_type:
            properties[PROPERTY_CONTENT_TYPE] = self.content_type
        if self.payload_format:
            properties[PROPERTY_PAYLOAD_FORMAT] = str(self.payload_format)
        body = self.payload
        if not body:
            properties[PROPERTY_EMPTY] = "1"
            body = b"\0"
        return Message(
            topic=boltmq_topic, body=body, tags=tag_of(self.topic), properties=properties
        )

    @classmethod
    def from_received(cls, message: ReceivedMessage, *, system: bool = False) -> Delivery | None:
        """The delivery a stored message makes (None: its MQTT topic is not of its topic;
        ``system``: a message of a system topic, whose MQTT topic may be any)."""
        properties = message.properties
        topic = properties.get(PROPERTY_TOPIC) or message.topic
        if not system and topic != message.topic and not topic.startswith(message.topic + "/"):
            return None
        try:
            qos = min(1, max(0, int(properties.get(PROPERTY_QOS, "1"))))
            expires_at_ms = int(properties.get(PROPERTY_EXPIRES_AT, "0"))
            payload_format = int(properties.get(PROPERTY_PAYLOAD_FORMAT, "0")) & 1
        except ValueError:
            qos, expires_at_ms, payload_format = 1, 0, 0
        return cls(
            topic,
            b"" if properties.get(PROPERTY_EMPTY) == "1" else message.body_bytes(),
            qos,
            expires_at_ms,
            properties.get(PROPERTY_CONTENT_TYPE),
            payload_format,
        )
