"""Session takeover across gateway pods: one connection per client id in the cluster.

A CONNECT takes over the client id's existing connection (MQTT 5 3.1.4-3); within a pod
the hub does that itself. Across pods, every pod announces each CONNECT on the system
topic ``MQTT_TAKEOVER``, one message a connect::

    {"client_id": "device-42", "pod": "mqtt-7c9f-xk2p", "connected_ms": 1767225600123}

and reads that topic from its end, as its fan-out reader does (the pods' shared
group, nothing committed: each pod keeps its own offsets in memory, and a notice is
of use only while both connections live). A notice from another pod closes this
pod's connection of that client id, with DISCONNECT 0x8E (session taken over), when the
local connection is the older one. Two connects through two pods in the same
millisecond both stay; a notice is lost with its pod's producer (the older connection
then lives on until the device drops it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from boltmq.message import Message, ReceivedMessage
from boltmq.producer import Producer
from services.mqtt.readers import QueueReader

log = logging.getLogger(__name__)

TAKEOVER_TOPIC = "MQTT_TAKEOVER"


class Takeovers:
    """Announces this pod's connects and closes the older local ones others announce."""

    def __init__(
        self,
        pod: str,
        producer: Producer,
        reader: Callable[
            [Callable[[Sequence[ReceivedMessage]], Sequence[Future[bool]]]], QueueReader
        ],
        close: Callable[[str, int], None],
    ) -> None:
        self.pod = pod
        self._producer = producer
        self._reader = reader(self._take)
        self._close = close
        """``close(client_id, announced_ms)``: on the loop, closes an older connection."""

    def start(self) -> QueueReader:
        """Start reading; the caller adds the topic (a blocking call) on its pool."""
        return self._reader.start()

    def add_topic(self) -> None:
        self._reader.add_topic(TAKEOVER_TOPIC)

    def stop(self) -> None:
        self._reader.stop()

    def announce(self, client_id: str, connected_ms: int) -> None:
        """Tell the other pods (a blocking send: from a pool thread)."""
        body = {"client_id": client_id, "pod": self.pod, "connected_ms": connected_ms}
        try:
            self._producer.send(Message(topic=TAKEOVER_TOPIC, body=json.dumps(body).encode()))
        except Exception as exc:  # the connection is served all the same
            log.warning("takeover notice of %s not sent: %s", client_id, exc)

    def _take(self, messages: Sequence[ReceivedMessage]) -> Sequence[Future[bool]]:
        for message in messages:
            try:
                notice = json.loads(message.body_bytes())
                client_id, pod = str(notice["client_id"]), str(notice["pod"])
                connected_ms = int(notice["connected_ms"])
            except (ValueError, KeyError, TypeError):
                continue  # not a notice of ours
            if pod != self.pod:
                self._close(client_id, connected_ms)
        return ()
