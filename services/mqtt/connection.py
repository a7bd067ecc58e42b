"""Connection: one device's MQTT 5.0 session on this pod, packet by packet.

Packets are decoded and encoded by the ``mqtt5`` library (docs/mqtt.md, "Library"): the
gateway never parses MQTT bytes itself (3.1.1 bytes are only rearranged for it). It only
buffers a device's bytes until the library finds a whole packet there, and refuses a
packet once more than ``max_packet_bytes`` (and its 5-byte header) are buffered without one.

A CONNECT of protocol level 4 makes the connection MQTT 3.1.1: its packets go through
:mod:`services.mqtt.mqtt311`, which turns them into the 5.0 packets handled here and the
answers back (no reason codes: a refused CONNECT gets a 3.1.1 return code, a DISCONNECT
below is a plain close, a refused QoS 1 PUBLISH closes the connection without PUBACK).

What a device may do and what it gets back (reason codes of MQTT 5.0):

| Device sends | Gateway answers |
|---|---|
| bytes the library cannot decode | DISCONNECT 0x81, close |
| a packet larger than ``max_packet_bytes`` | DISCONNECT 0x95, close |
| nothing for 1.5 x Keep Alive | DISCONNECT 0x8D, close, will published |
| CONNECT of MQTT 3.1 | CONNACK 0x01 (3.1.1's "unacceptable protocol version"), close |
| CONNECT with a wrong account | CONNACK 0x86 |
| PUBLISH QoS 2 | DISCONNECT 0x9B (CONNACK announced Maximum QoS 1) |
| PUBLISH with a Topic Alias | DISCONNECT 0x94 (CONNACK announced Topic Alias Maximum 0) |
| PUBLISH QoS 1 past Receive Maximum | DISCONNECT 0x93 |
| PUBLISH QoS 1 the brokers refused | PUBACK 0x87 (no PUB right), 0x90 (bad topic), 0x80 |
| SUBSCRIBE past ``max_subscriptions`` | SUBACK 0x97 for the filters past it |
| SUBSCRIBE without SUB right | SUBACK 0x87 |
| SUBSCRIBE QoS 2 | granted QoS 1 |
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable, Sequence

import mqtt5

from boltmq.kernel.signing import Credentials
from boltmq.message import ReceivedMessage
from boltmq.producer import SendError
from services.mqtt import mqtt311, sessions
from services.mqtt.bridge import BadCredentials, NotAuthorized
from services.mqtt.delivery import Delivery
from services.mqtt.hub import Hub
from services.mqtt.outbox import Outbox, QueueFull, Transport
from services.mqtt.readers import QueueReader
from services.mqtt.sessions import SessionRecord
from services.mqtt.topics import BadTopic, Filter, boltmq_topic, parse_filter

log = logging.getLogger(__name__)

MQTT31_REFUSED = mqtt311.connack(mqtt311.UNACCEPTABLE_PROTOCOL)
"""What a 3.1 client understands (an MQTT 5 CONNACK would be malformed to it)."""
FIXED_HEADER_MAX = 5
PUBLISH_BATCH = 64
PUBLISH_BATCH_BYTES = 1 << 20
PUBLISH_DRAIN_S = 10.0
R = mqtt5.DisconnectReasonCode


class Closing(Exception):
    """End the connection, after a DISCONNECT with ``reason`` (None: none sent)."""

    def __init__(self, reason: R | None, text: str = "", *, will: bool = True) -> None:
        super().__init__(text)
        self.reason = reason
        self.will = will


class Connection:
    """One device connection: CONNECT, then packets until either side closes."""

    def __init__(self, hub: Hub, transport: Transport) -> None:
        self.hub = hub
        self.config = hub.config
        self.transport = transport
        self.outbox = Outbox(transport, self.config.max_queued_messages, None)
        self.client_id = ""
        self.credentials: Credentials | None = None
        self.filters: dict[str, tuple[Filter, int]] = {}
        self.session: SessionRecord | None = None
        self.session_reader: QueueReader | None = None
        self.will: mqtt5.Will | None = None
        self.keep_alive = 0
        self.version = 5
        """The protocol level of the CONNECT: 5 (MQTT 5.0) or 4 (3.1.1)."""
        self._read = mqtt5.read
        self._buffer = bytearray()
        self._publishes: collections.deque[mqtt5.PublishPacket] = collections.deque()
        self._publish_ready = asyncio.Event()
        self._publishes_sent = asyncio.Event()
        """Set while no publish of the device waits to be sent to the cluster."""
        self._publishes_sent.set()
        self._in_flight = 0
        self._closing: Closing | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ reading
    async def _packet(self, timeout_s: float | None) -> mqtt5.Packet:
        """The next packet; Closing on a bad one, the end of the stream or a timeout."""
        limit = self.config.max_packet_bytes + FIXED_HEADER_MAX
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._buffer:
                try:
                    with memoryview(self._buffer) as view:
                        packet, size = self._read(view)
                except IndexError:  # not a whole packet yet
                    if len(self._buffer) > limit:
                        raise Closing(R.PACKET_TOO_LARGE, "packet too large") from None
                except ValueError as exc:
                    if "protocol" in str(exc) and not self.client_id:  # name or level
                        if self.version == 5 and mqtt311.protocol_level(self._buffer) == 4:
                            self.version, self._read = 4, mqtt311.read
                            self.outbox.encode = mqtt311.write
                            continue
                        self.transport.write(MQTT31_REFUSED)
                        raise Closing(None, "MQTT 3.1 refused") from None
                    raise Closing(R.MALFORMED_PACKET, f"malformed: {exc}") from None
                except Exception as exc:  # e.g. UnicodeDecodeError: bad UTF-8 in a string
                    raise Closing(R.MALFORMED_PACKET, f"malformed: {exc!r}") from None
                except BaseException as exc:
                    # mqtt5 0.8 panics (pyo3's PanicException, a BaseException) on some
                    # invalid UTF-8 strings; anything else (cancellation) goes on up
                    if type(exc).__name__ != "PanicException":
                        raise
                    raise Closing(R.MALFORMED_PACKET, "malformed (decoder panic)") from None
                else:
                    if size > limit:
                        raise Closing(R.PACKET_TOO_LARGE, "packet too large")
                    del self._buffer[:size]
                    return packet
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Closing(R.KEEP_ALIVE_TIMEOUT, "keep alive timed out")
            try:
                async with asyncio.timeout(left):
                    data = await self.transport.read()
            except TimeoutError:
                raise Closing(R.KEEP_ALIVE_TIMEOUT, "keep alive timed out") from None
            except (ConnectionError, OSError) as exc:
                raise Closing(None, f"read failed: {exc}") from None
            if not data:
                raise Closing(None, "the device closed the connection")
            self._buffer += data

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """Serve the connection to its end (never raises)."""
        try:
            connect = await self._packet(self.config.connect_timeout_ms / 1000)
            if not isinstance(connect, mqtt5.ConnectPacket):
                raise Closing(None, "the first packet is not CONNECT", will=False)
            if not await self._connect(connect):
                return
            self._tasks = [
                asyncio.create_task(self.outbox.run()),
                asyncio.create_task(self._publisher()),
            ]
            await self._restore()
            timeout = self.keep_alive * 1.5 if self.keep_alive else None
            while self._closing is None:
                await self._handle(await self._packet(timeout))
            raise self._closing
        except Closing as closing:
            await self._close(self._closing or closing)
        except Exception:
            log.exception("connection %s (%s) failed", self.client_id, self.transport.peer)
            await self._close(Closing(R.UNSPECIFIED_ERROR, "gateway error"))

    async def _close(self, closing: Closing) -> None:
        if closing.reason is not None and self.client_id:
            self.outbox.send(mqtt5.DisconnectPacket(reason_code=closing.reason))
        log.debug("%s (%s): %s", self.client_id, self.transport.peer, closing)
        if self._tasks:  # what the device published before it went is sent all the same
            try:
                async with asyncio.timeout(PUBLISH_DRAIN_S):
                    await self._publishes_sent.wait()
            except TimeoutError:
                log.warning("%s: publishes not sent within %s s", self.client_id, PUBLISH_DRAIN_S)
        self.outbox.close()
        for task in self._tasks:
            task.cancel()
        self.transport.close()
        if not self.client_id:
            return
        async with self.hub.leaving(self) as attached:
            if self.session_reader is not None:
                await self.hub.call(self.session_reader.stop)
            await self.hub.drop(self)
            if attached and self.session is not None:
                await self._save_session()
        if closing.will and self.will is not None:
            self._schedule_will(self.will)

    def close_later(self, reason: R, text: str) -> None:
        """End the connection from outside its reading (a take-over, a full queue)."""
        if self._closing is None:
            self.outbox.send(mqtt5.DisconnectPacket(reason_code=reason))
            self._closing = Closing(None, text)
            self.transport.close()

    # ------------------------------------------------------------------ CONNECT
    async def _connect(self, connect: mqtt5.ConnectPacket) -> bool:
        code = mqtt5.ConnAckReasonCode
        assigned = None
        client_id = connect.client_id
        if not client_id:
            client_id = assigned = f"boltmq-{uuid.uuid4().hex}"
        refusal = None
        if self.hub.full:
            refusal = code.SERVER_BUSY
        elif connect.authentication_method is not None:
            refusal = code.BAD_AUTHENTICATION_METHOD
        elif not connect.client_id and not connect.clean_start and self.version == 4:
            refusal = code.CLIENT_ID_NOT_VALID  # MQTT-3.1.3-8
        elif connect.will is not None and int(connect.will.qos) > 1 and self.version == 5:
            refusal = code.QUALITY_NOT_SUPPORTED
        elif connect.will is not None and not _valid_topic(connect.will.topic):
            refusal = code.TOPIC_NAME_INVALID
        if refusal is None:
            try:
                self.credentials = await self.hub.call(
                    self.hub.bridge.authenticate, connect.username, connect.password
                )
            except BadCredentials as exc:
                log.info("CONNECT of %s refused: %s", client_id, exc)
                refusal = code.BAD_USER_NAME_OR_PASSWORD
            except NotAuthorized:
                refusal = code.NOT_AUTHORIZED
            except Exception as exc:
                log.warning("CONNECT of %s: the cluster did not answer: %s", client_id, exc)
                refusal = code.SERVER_UNAVAILABLE
        if refusal is not None:
            self.outbox.send(mqtt5.ConnAckPacket(reason_code=refusal))
            raise Closing(None, f"CONNECT refused: {refusal.name}", will=False)
        self.client_id = client_id
        self.will = connect.will
        self.keep_alive = connect.keep_alive
        self.outbox.max_packet = connect.max_packet_size
        self.outbox.set_receive_max(connect.receive_max)
        expiry = min(connect.session_expiry_interval, self.config.session_expiry_max_s)
        if self.version == 4:  # 3.1.1: a session is kept until a clean-session CONNECT
            expiry = 0 if connect.clean_start else self.config.session_expiry_max_s
        old = self.hub.attach(self)
        if old is not None:
            old.close_later(R.SESSION_TAKEN_OVER, "another connection took the client id")
        await self.hub.settle(client_id)
        present = False
        if not connect.clean_start:
            try:
                record = await self.hub.call(
                    sessions.load, self.hub.bridge.producer.client, client_id
                )
            except Exception as exc:
                log.warning("session of %s not read: %s", client_id, exc)
                record = None
            if record is not None and not record.expired(int(time.time() * 1000)):
                self.session, present = record, True
                record.expiry_s = expiry
        if self.session is None and expiry:
            self.session = SessionRecord(client_id, [], expiry, generation=uuid.uuid4().hex)
        if self.session is not None and not present:
            await self._save_session()
        elif self.session is None and connect.clean_start:  # ends a stored session (3.1.2.4)
            self.session = SessionRecord(client_id, [], 0, ended=True)
            await self._save_session()
            self.session = None
        self.outbox.send(
            mqtt5.ConnAckPacket(
                session_present=present,
                assigned_client_id=assigned,
                session_expiry_interval=expiry
                if expiry != connect.session_expiry_interval
                else None,
                receive_max=self.config.receive_maximum,
                max_qos=mqtt5.QoS.AT_LEAST_ONCE,
                max_packet_size=self.config.max_packet_bytes,
                topic_alias_max=0,
                subscription_id_available=False,
            )
        )
        return True

    async def _restore(self) -> None:
        """Subscribe a resumed session's filters again (no retained messages: 3.8.4)."""
        if self.session is None:
            return
        for text, qos in self.session.filters:
            try:
                await self._add(parse_filter(text), qos, resumed=True)
            except BadTopic:
                continue

    async def _save_session(self) -> None:
        if self.session is None:
            return
        self.session.filters = [(text, qos) for text, (_, qos) in self.filters.items()]
        try:
            await self.hub.call(sessions.save, self.hub.bridge.producer.send, self.session)
        except Exception as exc:
            log.warning("session of %s not saved: %s", self.client_id, exc)

    # ------------------------------------------------------------------ packets
    async def _handle(self, packet: mqtt5.Packet) -> None:
        if isinstance(packet, mqtt5.PublishPacket):
            await self._on_publish(packet)
        elif isinstance(packet, mqtt5.PubAckPacket):
            self.outbox.acknowledged(packet.packet_id)
        elif isinstance(packet, mqtt5.SubscribePacket):
            await self._on_subscribe(packet)
        elif isinstance(packet, mqtt5.UnsubscribePacket):
            await self._on_unsubscribe(packet)
        elif isinstance(packet, mqtt5.PingReqPacket):
            self.outbox.send(mqtt5.PingRespPacket())
        elif isinstance(packet, mqtt5.DisconnectPacket):
            with_will = packet.reason_code == R.DISCONNECT_WITH_WILL_MESSAGE
            if self.session is not None and packet.session_expiry_interval is not None:
                self.session.expiry_s = min(
                    packet.session_expiry_interval, self.config.session_expiry_max_s
                )
            raise Closing(None, "DISCONNECT", will=with_will)
        else:  # a second CONNECT, PUBREL/PUBREC/PUBCOMP (no QoS 2 here), AUTH, server packets
            raise Closing(R.PROTOCOL_ERROR, f"unexpected {type(packet).__name__}")

    async def _on_publish(self, packet: mqtt5.PublishPacket) -> None:
        if int(packet.qos) > 1:
            raise Closing(R.QOS_NOT_SUPPORTED, "QoS 2 is not supported")
        if packet.topic_alias is not None:
            raise Closing(R.TOPIC_ALIAS_INVALID, "topic aliases are not supported")
        if int(packet.qos) == 1:
            self._in_flight += 1
            if self._in_flight > self.config.receive_maximum:
                raise Closing(R.RECEIVE_MAX_EXCEEDED, "receive maximum exceeded")
        elif len(self._publishes) >= self.config.max_queued_messages:
            self.outbox.dropped += 1  # QoS 0 from a device faster than the cluster
            return
        self._publishes.append(packet)
        self._publishes_sent.clear()
        self._publish_ready.set()

    async def _publisher(self) -> None:
        """Send the device's publishes to the cluster in their order: consecutive ones
        of one BoltMQ topic together (one batch, one queue: the client id shards)."""
        while True:
            if not self._publishes:
                self._publishes_sent.set()
                self._publish_ready.clear()
                await self._publish_ready.wait()
                continue
            batch = [self._publishes.popleft()]
            first = batch[0].topic.split("/", 1)[0]
            size = len(batch[0].payload)
            while (
                self._publishes
                and len(batch) < PUBLISH_BATCH
                and size < PUBLISH_BATCH_BYTES
                and self._publishes[0].topic.split("/", 1)[0] == first
            ):
                batch.append(self._publishes.popleft())
                size += len(batch[-1].payload)
            now_ms = int(time.time() * 1000)
            deliveries = [
                Delivery(
                    p.topic,
                    p.payload,
                    int(p.qos),
                    now_ms + p.message_expiry_interval * 1000 if p.message_expiry_interval else 0,
                    p.content_type,
                    p.payload_format_indicator,
                )
                for p in batch
            ]
            reasons = await self.publish(deliveries, [p.retain for p in batch], self.credentials)
            for packet, reason in zip(batch, reasons, strict=True):
                if self.version == 4 and int(packet.qos) == 1 and int(reason):
                    self.close_later(R.UNSPECIFIED_ERROR, f"PUBLISH refused: {reason.name}")
                    break  # 3.1.1 has no PUBACK reason: the device sends it again
                if int(packet.qos) == 1 and packet.packet_id is not None:
                    self._in_flight -= 1
                    self.outbox.send(mqtt5.PubAckPacket(packet.packet_id, reason_code=reason))

    async def publish(
        self, deliveries: list[Delivery], retains: list[bool], credentials: Credentials | None
    ) -> list[mqtt5.PubAckReasonCode]:
        """Send ``deliveries`` (of one BoltMQ topic) to the cluster as ``credentials``'
        account, and retain those flagged; a reason code each."""
        code = mqtt5.PubAckReasonCode
        reasons = [code.SUCCESS] * len(deliveries)
        valid: list[int] = []
        for n, delivery in enumerate(deliveries):
            try:
                topic = boltmq_topic(delivery.topic)
                valid.append(n)
            except BadTopic as exc:
                log.info("PUBLISH of %s refused: %s", self.client_id, exc)
                reasons[n] = code.TOPIC_NAME_INVALID
        if not valid:
            return reasons
        messages = [deliveries[n].to_message(topic) for n in valid]
        retained = [deliveries[n] for n in valid if retains[n]]
        failure = code.SUCCESS
        try:
            await self.hub.call(self.hub.bridge.send, credentials, messages, self.client_id)
            for delivery in retained:
                record = self.hub.retained.message(delivery)
                send = self.hub.bridge.producer.send
                result = await self.hub.call(send, record, delivery.topic)  # sharded by topic
                self.hub.retained.remember(delivery, result.unique_id)
        except SendError as exc:
            refused = self.hub.bridge.refused(exc)
            failure = code.NOT_AUTHORIZED if refused else code.UNSPECIFIED_ERROR
            log.info("PUBLISH of %s to %s: %s", self.client_id, topic, exc)
        except Exception as exc:
            failure = code.UNSPECIFIED_ERROR
            log.warning("PUBLISH of %s to %s failed: %s", self.client_id, topic, exc)
        for n in valid:
            reasons[n] = failure
        return reasons

    async def _on_subscribe(self, packet: mqtt5.SubscribePacket) -> None:
        if not packet.topic_filters:
            raise Closing(R.PROTOCOL_ERROR, "SUBSCRIBE without a filter")  # 3.8.3-2
        code = mqtt5.SubAckReasonCode
        reasons: list[mqtt5.SubAckReasonCode] = []
        retained: list[tuple[Filter, int]] = []
        for wanted in packet.topic_filters:
            try:
                filter_ = parse_filter(wanted.pattern)
            except BadTopic:
                reasons.append(code.TOPIC_FILTER_INVALID)
                continue
            if (
                filter_.text not in self.filters
                and len(self.filters) >= self.config.max_subscriptions
            ):
                reasons.append(code.QUOTA_EXCEEDED)
                continue
            try:
                allowed = await self.hub.call(
                    self.hub.bridge.may_subscribe, self.credentials, filter_.topic
                )
            except Exception as exc:
                log.warning("SUBSCRIBE of %s: %s", self.client_id, exc)
                reasons.append(code.UNSPECIFIED_ERROR)
                continue
            if not allowed:
                reasons.append(code.NOT_AUTHORIZED)
                continue
            qos = min(int(wanted.max_qos), 1)
            new = filter_.text not in self.filters
            await self._add(filter_, qos)
            reasons.append(code(qos))
            handling = wanted.retain_handling
            if filter_.share is None and (
                handling == mqtt5.RetainHandling.SEND_ALWAYS
                or (handling == mqtt5.RetainHandling.SEND_IF_SUBSCRIPTION_NOT_EXISTS and new)
            ):
                retained.append((filter_, qos))
        self.outbox.send(mqtt5.SubAckPacket(packet.packet_id, reasons))
        for filter_, qos in retained:
            for delivery in self.hub.retained.matching(filter_):
                self._put(delivery, min(qos, delivery.qos), retain=True)
        if self.session is not None:
            await self._save_session()

    async def _add(self, filter_: Filter, qos: int, *, resumed: bool = False) -> None:
        self.filters[filter_.text] = (filter_, qos)
        if self.session is not None and filter_.share is None:
            if self.session_reader is None:
                consumer = self.hub.bridge.consumer(self.session.group)
                self.session_reader = QueueReader(
                    consumer, self._from_session, name=f"session-{self.client_id}", commits=True
                ).start()
            await self.hub.call(self.session_reader.add_topic, filter_.topic, resumed)
        else:
            await self.hub.subscribe(self, filter_, qos)

    async def _on_unsubscribe(self, packet: mqtt5.UnsubscribePacket) -> None:
        if not packet.patterns:
            raise Closing(R.PROTOCOL_ERROR, "UNSUBSCRIBE without a filter")  # 3.10.3-2
        code = mqtt5.UnsubAckReasonCode
        reasons = []
        for text in packet.patterns:
            entry = self.filters.pop(text, None)
            if entry is None:
                reasons.append(code.NO_SUBSCRIPTION_EXISTED)
                continue
            filter_ = entry[0]
            if self.session is not None and filter_.share is None:
                if self.session_reader is not None and not any(
                    f.topic == filter_.topic and f.share is None for f, _ in self.filters.values()
                ):
                    await self.hub.call(self.session_reader.remove_topic, filter_.topic)
            else:
                await self.hub.unsubscribe(self, filter_)
            reasons.append(code.SUCCESS)
        self.outbox.send(mqtt5.UnsubAckPacket(packet.packet_id, reasons))
        if self.session is not None:
            await self._save_session()

    # ------------------------------------------------------------------ delivery
    def offer(self, delivery: Delivery, qos: int) -> concurrent.futures.Future[bool] | None:
        """Queue ``delivery`` at ``min(qos, its QoS)``; the future of its acknowledgement."""
        effective = min(qos, delivery.qos)
        acked: concurrent.futures.Future[bool] | None = (
            concurrent.futures.Future() if effective else None
        )
        self._put(delivery, effective, acked=acked)
        return acked

    def _put(
        self,
        delivery: Delivery,
        qos: int,
        *,
        retain: bool = False,
        acked: concurrent.futures.Future[bool] | None = None,
    ) -> None:
        try:
            self.outbox.put(delivery, qos, retain, acked)
        except QueueFull as exc:
            self.close_later(R.QUOTA_EXCEEDED, str(exc))

    def _from_session(
        self, messages: Sequence[ReceivedMessage]
    ) -> Sequence[concurrent.futures.Future[bool]]:
        """The session reader's handler (its thread): offer the matching messages."""
        waits: list[concurrent.futures.Future[bool]] = []
        for message in messages:
            delivery = Delivery.from_received(message)
            if delivery is None or delivery.expired():
                continue
            granted = [
                q
                for f, q in list(self.filters.values())
                if f.share is None and f.matches(delivery.topic)
            ]
            if not granted:
                continue
            handed: concurrent.futures.Future[bool] = concurrent.futures.Future()
            waits.append(handed)
            self.hub.post(_offer_into(self, delivery, max(granted), handed))
        return waits

    # ------------------------------------------------------------------ will
    def _schedule_will(self, will: mqtt5.Will) -> None:
        delay = min(will.will_delay_interval, self.session.expiry_s if self.session else 0)
        expiry = will.message_expiry_interval
        delivery = Delivery(
            will.topic,
            will.payload or b"",
            min(int(will.qos), 1),  # 3.1.1 allows a QoS 2 will: sent at QoS 1
            int(time.time() * 1000) + (delay + expiry) * 1000 if expiry else 0,
            will.content_type,
            will.payload_format_indicator,
        )
        credentials = self.credentials

        async def publish_will() -> None:
            await asyncio.sleep(delay)
            self.hub.wills.pop(self.client_id, None)
            (reason,) = await self.publish([delivery], [will.retain], credentials)
            log.info("will of %s on %s: %s", self.client_id, will.topic, reason.name)

        self.hub.wills[self.client_id] = asyncio.create_task(publish_will())


def _offer_into(
    connection: Connection,
    delivery: Delivery,
    qos: int,
    handed: concurrent.futures.Future[bool],
) -> Callable[[], None]:
    def offer() -> None:
        acked = connection.offer(delivery, qos)
        if acked is None:
            handed.set_result(True)
        else:
            acked.add_done_callback(lambda f: handed.set_result(bool(f.result())))

    return offer


def _valid_topic(topic: str) -> bool:
    try:
        boltmq_topic(topic)
    except BadTopic:
        return False
    return True
