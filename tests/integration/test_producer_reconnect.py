"""A producer's send right after its only broker group is back.

A gRPC channel whose peer refused it backs off (up to a second and its jitter
here) and, until its next attempt, fails every call at once, even when the peer
is already back. A producer whose retries have no other group to go to waits
once for that channel's next attempt (:func:`boltmq.kernel.channels.
await_connected`), so a send made as the broker returns is answered by it.
"""

from __future__ import annotations

import time

from boltmq import Message, Producer, SendStatus
from boltmq.producer import SendError
from tests.integration.conftest import Cluster

TOPIC = "Reconnect"


def test_sends_fail_while_the_only_broker_is_down_and_succeed_as_soon_as_it_is_back(
    cluster: Cluster,
) -> None:
    failed: list[str] = []

    def send_while_down() -> None:
        # Failed attempts while the broker is down push the channel's backoff to its
        # longest, so the broker is back well before the channel's next attempt.
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            try:
                producer.send(Message(topic=TOPIC, body=b"down"))
            except SendError as exc:
                failed.append(str(exc))

    with Producer(cluster.registry.address, "reconnect-pg") as producer:
        before = producer.send(Message(topic=TOPIC, body=b"before"))
        assert before.status is SendStatus.SEND_OK
        cluster.restart_broker(kill=True, while_down=send_while_down)
        after = [producer.send(Message(topic=TOPIC, body=b"after-%d" % i)) for i in range(3)]
    assert failed and all("UNAVAILABLE" in text for text in failed), failed
    assert [r.status for r in after] == [SendStatus.SEND_OK] * 3
    assert len({r.unique_id for r in after}) == 3
