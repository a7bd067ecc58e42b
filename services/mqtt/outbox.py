"""Outbox: what one connection sends to its device, bounded (docs/mqtt.md, "Limits").

Application messages wait in a queue of at most ``max_queued_messages``; a device that
reads too slowly meets the bound: a QoS 0 message past it is dropped (counted), a QoS 1
message past it closes the connection with DISCONNECT 0x97 (its persistent session, if
any, has it again on reconnect; a clean session loses it, as MQTT allows). At most the
device's Receive Maximum QoS 1 messages are unacknowledged at once; each gets a packet
id not in use, and its acknowledgement future (the session reader's or share group's)
is resolved True by the PUBACK, False when the connection ends first.

The writer awaits the transport's ``drain`` after each packet, so a device that stops
reading holds one packet's worth of the gateway's memory plus its queue.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Protocol

import mqtt5

from services.mqtt.delivery import Delivery

log = logging.getLogger(__name__)

PACKET_IDS = 65_535


class Transport(Protocol):
    """A device's byte stream: TCP, TLS or WebSocket."""

    peer: str

    async def read(self) -> bytes:
        """Some bytes; b"" at the end of the stream."""
        ...

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class QueueFull(Exception):
    """A QoS 1 message met a full queue: the device reads too slowly."""


class Outbox:
    """The connection's queue of outgoing messages and its QoS 1 messages in flight."""

    def __init__(self, transport: Transport, max_queued: int, max_packet: int | None) -> None:
        self.transport = transport
        self.max_queued = max_queued
        self.max_packet = max_packet
        """The device's Maximum Packet Size (None: no limit): larger messages are not sent."""
        self.receive_max = 65_535
        self._queue: collections.deque[
            tuple[Delivery, int, bool, concurrent.futures.Future[bool] | None]
        ] = collections.deque()
        self._ready = asyncio.Event()
        self._slots = asyncio.Semaphore(self.receive_max)
        self._in_flight: dict[int, concurrent.futures.Future[bool] | None] = {}
        self._next_id = 0
        self.dropped = 0
        self.closed = False
        self.encode: Callable[[object], bytes] = _write_v5
        """The bytes of an ``mqtt5`` packet for the device (3.1.1: ``mqtt311.write``)."""

    def set_receive_max(self, receive_max: int) -> None:
        self.receive_max = receive_max
        self._slots = asyncio.Semaphore(receive_max)

    def put(
        self,
        delivery: Delivery,
        qos: int,
        retain: bool = False,
        acked: concurrent.futures.Future[bool] | None = None,
    ) -> None:
        """Queue a message; QueueFull for a QoS 1 one past the bound."""
        if self.closed:
            if acked is not None and not acked.done():
                acked.set_result(False)
            return
        if len(self._queue) >= self.max_queued:
            if qos == 0:
                self.dropped += 1
                if acked is not None and not acked.done():
                    acked.set_result(True)
                return
            if acked is not None and not acked.done():
                acked.set_result(False)
            raise QueueFull(f"{len(self._queue)} messages wait for {self.transport.peer}")
        self._queue.append((delivery, qos, retain, acked))
        self._ready.set()

    def send(self, packet: object) -> None:
        """Write a control packet at once (acks, SUBACK, PINGRESP, DISCONNECT)."""
        if not self.closed:
            data = self.encode(packet)
            if data:
                self.transport.write(data)

    def acknowledged(self, packet_id: int) -> bool:
        """A PUBACK came: release the slot; False when ``packet_id`` was not in flight."""
        if packet_id not in self._in_flight:
            return False
        acked = self._in_flight.pop(packet_id)
        self._slots.release()
        if acked is not None and not acked.done():
            acked.set_result(True)
        return True

    def close(self) -> None:
        """Fail every waiting acknowledgement (the session reads them again)."""
        self.closed = True
        self._ready.set()
        for _, _, _, acked in self._queue:
            if acked is not None and not acked.done():
                acked.set_result(False)
        self._queue.clear()
        for acked in self._in_flight.values():
            if acked is not None and not acked.done():
                acked.set_result(False)
        self._in_flight.clear()

    def _packet_id(self) -> int:
        for _ in range(PACKET_IDS):
            self._next_id = self._next_id % PACKET_IDS + 1
            if self._next_id not in self._in_flight:
                return self._next_id
        raise RuntimeError("no packet id free")  # cannot happen: slots <= 65535

    async def run(self) -> None:
        """Write queued messages until closed."""
        while not self.closed:
            if not self._queue:
                self._ready.clear()
                await self._ready.wait()
                continue
            delivery, qos, retain, acked = self._queue.popleft()
            if delivery.expired():
                if acked is not None and not acked.done():
                    acked.set_result(True)  # nothing left to deliver
                continue
            packet_id = None
            if qos:
                await self._slots.acquire()
                if self.closed:
                    break
                packet_id = self._packet_id()
                self._in_flight[packet_id] = acked
            publish = mqtt5.PublishPacket(
                delivery.topic,
                delivery.payload,
                qos=mqtt5.QoS(qos),
                retain=retain,
                packet_id=packet_id,
                message_expiry_interval=delivery.expiry_left_s(),
                content_type=delivery.content_type,
                payload_format_indicator=delivery.payload_format,
            )
            data = self.encode(publish)
            if self.max_packet is not None and len(data) > self.max_packet:
                self.dropped += 1  # MQTT 5 3.1.2.25: discarded as if delivered
                if packet_id is not None:
                    self.acknowledged(packet_id)
                elif acked is not None and not acked.done():
                    acked.set_result(True)
                continue
            self.transport.write(data)
            if qos == 0 and acked is not None and not acked.done():
                acked.set_result(True)
            await self.transport.drain()


def _write_v5(packet: object) -> bytes:
    data: bytes = packet.write()  # type: ignore[attr-defined]
    return data
