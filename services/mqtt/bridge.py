"""Bridge: the gateway's side of the cluster, through the BoltMQ SDK (blocking calls).

Devices are BoltMQ ACL accounts (docs/mqtt.md, "Accounts"): a device's CONNECT carries an
access key as its user name and the secret as its password, and the gateway lets the
brokers decide everything with the device's own signature:

- CONNECT: a ``GetBrokerInfo`` signed with the device's credentials (any valid account
  may make it): ``UNAUTHENTICATED`` (unknown key, wrong secret) is CONNACK 0x86;
- PUBLISH: the device's messages are sent by a producer signing with its credentials,
  so a topic the account lacks ``PUB`` on is refused by the broker (PUBACK 0x87);
- SUBSCRIBE: a ``QueryMessageByKey`` of the topic signed by the device (it needs ``SUB``
  on the topic): ``PERMISSION_DENIED`` is SUBACK 0x87.

The gateway's own account (``access_key``/``secret_key``) reads for the devices (its
consumer groups ``MQTT_*``) and writes the sessions' and retained messages' system
topics. With the brokers' ACL off and no ``access_key``, no device is asked for one.

Producers (one per device account, each with its SDK client) are kept for the last
``PRODUCERS_KEPT`` accounts used.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import grpc

from boltmq.client import ClientInstance, rpc_error_text
from boltmq.kernel.signing import Credentials, SigningError
from boltmq.kernel.tls import client_tls
from boltmq.message import Message, SendResult
from boltmq.options import ProducerOptions
from boltmq.producer import Producer, SendError
from boltmq.pull_consumer import PullConsumer
from boltmq.v1 import broker_pb2, store_pb2
from services.mqtt.config import MqttConfig

log = logging.getLogger(__name__)

PRODUCERS_KEPT = 256
AUTH_CACHE_S = 30.0
"""A verified key and secret are believed this long before the brokers are asked again."""
GATEWAY_GROUP = "MQTT_GATEWAY"
"""Consumer group of the pods' fan-out reads (never committed) and the producer group."""
SUBSCRIBE_PROBE_KEY = "mqtt-subscribe-check"


class NotAuthorized(Exception):
    """The brokers refused the device's account (the text says why)."""


class BadCredentials(Exception):
    """No such account, or the wrong secret."""


class Bridge:
    """The gateway's SDK clients and the checks made with the devices' credentials."""

    def __init__(self, config: MqttConfig) -> None:
        self.registry = config.registry
        self.tls = client_tls(config)
        self.credentials = (
            Credentials(config.access_key, config.secret_key) if config.access_key else None
        )
        self.acl = self.credentials is not None
        """Whether devices must give an account (the gateway has one: the ACL is on)."""
        self.options = ProducerOptions(retry_times=1, compress_body_over=1 << 30)
        """Bodies go as the devices sent them (compression off: no broker takes 1 GiB)."""
        self.producer = Producer(
            self.registry,
            GATEWAY_GROUP,
            options=self.options,
            tls=self.tls,
            credentials=self.credentials,
        ).start()
        """The gateway's own producer: system topics, and devices when the ACL is off."""
        self._producers: OrderedDict[str, Producer] = OrderedDict()
        self._verified: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def consumer(self, group: str) -> PullConsumer:
        """A pull consumer of ``group`` with the gateway's account."""
        return PullConsumer(self.registry, group, tls=self.tls, credentials=self.credentials)

    def close(self) -> None:
        with self._lock:
            producers, self._producers = list(self._producers.values()), OrderedDict()
        for producer in [*producers, self.producer]:
            producer.shutdown()

    # ------------------------------------------------------------------ devices
    def authenticate(self, username: str | None, password: bytes | None) -> Credentials | None:
        """The device's credentials (None while the ACL is off); BadCredentials or
        NotAuthorized when the brokers refuse them."""
        if not self.acl:
            return None
        if not username or password is None:
            raise BadCredentials("the ACL is on: give an access key and its secret")
        try:
            creds = Credentials(username, password.decode("utf-8"))
        except (SigningError, UnicodeDecodeError) as exc:
            raise BadCredentials(str(exc)) from None
        key = (creds.access_key, hashlib.sha256(creds.secret_key.encode()).hexdigest())
        with self._lock:
            if time.monotonic() - self._verified.get(key, -AUTH_CACHE_S) < AUTH_CACHE_S:
                return creds
        # A client of its own: no producer (heartbeating) is made for credentials the
        # brokers have not accepted yet.
        client = ClientInstance(self.registry, tls=self.tls, credentials=creds)
        try:
            client.broker(self._any_master(client)).GetBrokerInfo(
                broker_pb2.GetBrokerInfoRequest(), timeout=client.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNAUTHENTICATED:
                raise BadCredentials(rpc_error_text(exc)) from None
            if exc.code() is grpc.StatusCode.PERMISSION_DENIED:
                raise NotAuthorized(rpc_error_text(exc)) from None
            raise
        finally:
            client.close()
        with self._lock:
            self._verified[key] = time.monotonic()
            if len(self._verified) > 4 * PRODUCERS_KEPT:
                self._verified.clear()
        return creds

    def may_subscribe(self, creds: Credentials | None, topic: str) -> bool:
        """Whether the device's account holds SUB on ``topic`` (True while the ACL is off)."""
        if creds is None:
            return True
        client = self._producer(creds).client
        request = store_pb2.QueryByKeyRequest(topic=topic, key=SUBSCRIBE_PROBE_KEY, max_count=1)
        try:
            client.broker(self._any_master(client)).QueryMessageByKey(
                request, timeout=client.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                return False
            if exc.code() is not grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: not created yet
                raise
        return True

    def send(
        self, creds: Credentials | None, messages: Sequence[Message], client_id: str
    ) -> list[SendResult]:
        """Send messages of one topic as the device, in one batch (SendError when refused,
        e.g. no PUB on the topic). The client id is the sharding key: a device's messages
        to a topic stay in one queue, in their order (MQTT 4.6)."""
        producer = self.producer if creds is None else self._producer(creds)
        return producer.send_batch(messages, sharding_key=client_id)

    @staticmethod
    def refused(exc: SendError) -> bool:
        """Whether a send failed for the account's rights (not for the cluster's state)."""
        return "PERMISSION_DENIED" in str(exc) or "UNAUTHENTICATED" in str(exc)

    def _producer(self, creds: Credentials) -> Producer:
        with self._lock:
            producer = self._producers.get(creds.access_key)
            if producer is not None and producer.client.credentials == creds:
                self._producers.move_to_end(creds.access_key)
                return producer
        producer = Producer(
            self.registry, GATEWAY_GROUP, options=self.options, tls=self.tls, credentials=creds
        ).start()
        with self._lock:
            old = self._producers.pop(creds.access_key, None)
            self._producers[creds.access_key] = producer
            evicted = (
                self._producers.popitem(last=False)[1]
                if len(self._producers) > PRODUCERS_KEPT
                else None
            )
        for stale in (old, evicted):
            if stale is not None:
                stale.shutdown()
        return producer

    @staticmethod
    def _any_master(client: ClientInstance) -> str:
        masters = [b.address for b in client.cluster_brokers() if b.broker_id == 0]
        if not masters:
            raise ConnectionError("no live master broker is registered")
        return sorted(masters)[0]
