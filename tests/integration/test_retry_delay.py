"""Retry, dead letters and delay messages end to end (real registry, store and broker).

The broker runs with short delay levels (LEVELS_MS) so every wait is well under
a second or two. Timing assertions only ever say "not early": a delivery is
compared with the moment it was due, never with a speed threshold; "delivered"
is a bounded condition wait.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq import (
    ConsumeResult,
    Message,
    MessageError,
    Producer,
    PullConsumer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    SendError,
)
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, Cluster
from tests.integration.procs import REPO_ROOT, ServiceProcess
from tests.integration.sdk_fixtures import FAST, pull_everything, wait_until

LEVELS_MS = (200, 400, 600, 800, 1000, 1200)
LEVELS = " ".join(f"{ms}ms" for ms in LEVELS_MS)


class DelayCluster(Cluster):
    """The test cluster with short delay levels (and, optionally, more broker settings)."""

    extra_broker_settings: tuple[str, ...] = ()

    def _start_broker(self, port: int = 0) -> ServiceProcess:
        return self._start(
            "broker",
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            *CLUSTER_BROKER_SETTINGS,
            f"message_delay_level={LEVELS}",
            *self.extra_broker_settings,
            port=port,
        )


@pytest.fixture
def delay_cluster(tmp_path: Path) -> Iterator[DelayCluster]:
    started = DelayCluster(tmp_path)
    yield started
    started.stop()


@pytest.fixture
def producer(delay_cluster: DelayCluster) -> Iterator[Producer]:
    with Producer(delay_cluster.registry.address, "delay-pg") as made:
        yield made


class Deliveries:
    """A listener recording (receive time, message fields) and answering with ``outcome``."""

    def __init__(self, outcome: Callable[[ReceivedMessage], bool] = lambda m: True) -> None:
        self.seen: list[dict[str, Any]] = []
        self.outcome = outcome
        self._lock = threading.Lock()

    def __call__(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        now_ms = time.time_ns() // 1_000_000
        ok = True
        for m in messages:
            with self._lock:
                self.seen.append(
                    dict(
                        at_ms=now_ms,
                        body=bytes(m.body),
                        topic=m.topic,
                        reconsume_times=m.reconsume_times,
                        msg_id=m.msg_id,
                        props=dict(m.properties),
                        tags=m.tags,
                        keys=list(m.keys),
                        store_ms=m.store_timestamp,
                        born_ms=m.born_timestamp,
                    )
                )
            ok = self.outcome(m) and ok
        return ConsumeResult.SUCCESS if ok else ConsumeResult.RECONSUME_LATER

    def of(self, body: bytes) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self.seen if s["body"] == body]

    def bodies(self) -> Counter[bytes]:
        with self._lock:
            return Counter(s["body"] for s in self.seen)


def consumer(
    cluster: Cluster, group: str, topic: str, listener: Any, **options: Any
) -> PushConsumer:
    return PushConsumer(
        cluster.registry.address,
        group,
        {topic: "*"},
        listener,
        options=PushConsumerOptions(**{**FAST, **options}),
    ).start()


def broker_stub(cluster: Cluster) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerServiceStub]:
    channel = sync_channel(cluster.broker.address)
    return channel, broker_pb2_grpc.BrokerServiceStub(channel)


# ===================================================================== delay levels
def test_each_delay_level_is_delivered_when_due_never_early(
    delay_cluster: DelayCluster, producer: Producer
) -> None:
    producer.send(Message(topic="delayed", body=b"warm-up"))  # the topic exists
    listener = Deliveries()
    c = consumer(delay_cluster, "cg-delay", "delayed", listener)
    try:
        listener_ready = lambda: listener.bodies()[b"warm-up"] == 1  # noqa: E731
        wait_until(listener_ready, "the warm-up message")
        sent_ms = {}
        for level in range(1, len(LEVELS_MS) + 1):
            body = f"level-{level}".encode()
            sent_ms[body] = time.time_ns() // 1_000_000
            result = producer.send(
                Message(
                    topic="delayed",
                    body=body,
                    tags="T",
                    keys=[f"k{level}"],
                    delay_level=level,
                    properties={"n": str(level)},
                )
            )
            assert result.msg_id
        wait_until(
            lambda: all(listener.bodies()[b] >= 1 for b in sent_ms), "every delay level's message"
        )
    finally:
        c.shutdown()
    for level, delay_ms in enumerate(LEVELS_MS, start=1):
        body = f"level-{level}".encode()
        [seen] = listener.of(body)  # exactly once
        assert seen["at_ms"] >= sent_ms[body] + delay_ms, f"level {level} came early"
        assert seen["store_ms"] >= seen["born_ms"] + delay_ms, f"level {level} stored early"
        assert seen["topic"] == "delayed" and seen["tags"] == "T"
        assert seen["keys"] == [f"k{level}"] and seen["props"]["n"] == str(level)
        for internal in ("DELAY", "DELAY_MS", "REAL_TOPIC", "REAL_QID"):
            assert internal not in seen["props"]


def test_deliver_at_ms_beyond_the_levels_is_not_early(
    delay_cluster: DelayCluster, producer: Producer
) -> None:
    # 2.5 s is past the longest level (1.2 s): reached in hops of 1.2 s, 1 s and the rest.
    deliver_at = time.time_ns() // 1_000_000 + 2_500
    producer.send(Message(topic="timed", body=b"at", deliver_at_ms=deliver_at))
    soon = time.time_ns() // 1_000_000 + 300
    producer.send(Message(topic="timed", body=b"soon", deliver_at_ms=soon))
    listener = Deliveries()
    c = consumer(delay_cluster, "cg-timed", "timed", listener)
    try:
        wait_until(
            lambda: listener.bodies()[b"at"] and listener.bodies()[b"soon"], "both timed messages"
        )
        time.sleep(0.5)  # a duplicate would show by now
    finally:
        c.shutdown()
    [at] = listener.of(b"at")
    [early] = listener.of(b"soon")
    assert at["at_ms"] >= deliver_at and at["store_ms"] >= deliver_at
    assert early["at_ms"] >= soon
    assert "TIMER_DELIVER_MS" not in at["props"]


def test_delay_messages_survive_broker_restarts_exactly_once(tmp_path: Path) -> None:
    # Progress is never saved on its own (a 10 min interval): after a kill -9 the
    # broker starts from nothing delivered, and every delivered entry must be
    # recognised as such (the duplicate check), none appended twice.
    DelayCluster.extra_broker_settings = ("offset_persist_interval_ms=600000",)
    cluster = DelayCluster(tmp_path)
    try:
        with Producer(cluster.registry.address, "restart-pg") as producer:
            bodies = []
            for i in range(24):
                body = f"r-{i:02d}".encode()
                bodies.append(body)
                producer.send(
                    Message(topic="restart", body=body, delay_level=1 + i % len(LEVELS_MS))
                )
            time.sleep(LEVELS_MS[2] / 1000)  # some are due and delivered, some not
            cluster.restart_broker(kill=True)
            time.sleep(LEVELS_MS[0] / 1000)
            cluster.restart_broker()  # and a graceful one: progress saved at shutdown
            for i in range(24, 30):
                body = f"r-{i:02d}".encode()
                bodies.append(body)
                producer.send(Message(topic="restart", body=body, delay_level=2))

        def delivered() -> Counter[bytes]:
            return Counter(bytes(m.body) for m in pull_everything(cluster, "restart"))

        wait_until(lambda: set(delivered()) == set(bodies), "every delay message")
        time.sleep(LEVELS_MS[-1] / 1000)
        counts = delivered()
        assert set(counts) == set(bodies)
        assert max(counts.values()) == 1, f"delivered twice: {counts.most_common(3)}"
        logs = "".join(p.read_text() for p in cluster.log_dir.glob("broker-*.log"))
        assert "delivered before a restart; skipped" in logs  # the crash window was real
    finally:
        DelayCluster.extra_broker_settings = ()
        cluster.stop()


def test_bad_delay_inputs_get_clear_errors(delay_cluster: DelayCluster, producer: Producer) -> None:
    now = time.time_ns() // 1_000_000
    with pytest.raises(SendError, match="delay level 7 is not 1..6"):
        producer.send(Message(topic="bad", body=b"x", delay_level=7))
    with pytest.raises(MessageError, match="delay_level 19"):
        producer.send(Message(topic="bad", body=b"x", delay_level=19))
    with pytest.raises(MessageError, match="not both"):
        producer.send(Message(topic="bad", body=b"x", delay_level=1, deliver_at_ms=now))
    with pytest.raises(MessageError, match="non-negative"):
        producer.send(Message(topic="bad", body=b"x", delay_level=-1))
    with pytest.raises(SendError, match="in the past"):
        producer.send(Message(topic="bad", body=b"x", deliver_at_ms=now - 60_000))
    with pytest.raises(SendError, match="ahead, at most"):
        producer.send(Message(topic="bad", body=b"x", deliver_at_ms=now + 10 * 86_400_000))
    with pytest.raises(SendError, match="properties.*integer"):
        producer.send(Message(topic="bad", body=b"x", properties={"DELAY": "soon"}))


# ===================================================================== retry and DLQ
def test_failed_messages_come_back_through_the_retry_topic_with_growing_delays(
    delay_cluster: DelayCluster, producer: Producer
) -> None:
    fail_first = 2
    listener = Deliveries(lambda m: m.reconsume_times >= fail_first)
    sent = producer.send(Message(topic="work", body=b"job", tags="J", keys=["job-1"]))
    c = consumer(delay_cluster, "cg-retry", "work", listener)
    try:
        wait_until(lambda: len(listener.of(b"job")) == fail_first + 1, "two retries")
        time.sleep(LEVELS_MS[-1] / 1000)  # nothing more comes once it succeeded
    finally:
        c.shutdown()
    seen = listener.of(b"job")
    assert [s["reconsume_times"] for s in seen] == [0, 1, 2]
    assert all(s["topic"] == "work" and s["tags"] == "J" for s in seen)
    assert seen[0]["msg_id"] == sent.msg_id
    for attempt in (1, 2):
        retry = seen[attempt]
        assert retry["props"]["RETRY_TOPIC"] == "work"
        assert retry["props"]["ORIGIN_MESSAGE_ID"] == sent.msg_id
        assert retry["props"]["RECONSUME_TIME"] == str(attempt)
        # level 3 + reconsume_times of the failed delivery; never early
        delay_ms = LEVELS_MS[3 + attempt - 1 - 1]
        assert retry["at_ms"] >= seen[attempt - 1]["at_ms"] + delay_ms


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )


def test_dead_letters_after_the_limit_listed_and_resent_by_the_cli(
    delay_cluster: DelayCluster, producer: Producer
) -> None:
    healthy = threading.Event()
    listener = Deliveries(lambda m: healthy.is_set())
    producer.send(Message(topic="poison", body=b"bad", keys=["p-1"]))
    c = consumer(delay_cluster, "cg-dlq", "poison", listener, max_reconsume_times=2)
    registry = delay_cluster.registry.address
    try:
        # delivered 1 + 2 times, then dead: the CLI lists it
        def listed() -> str:
            out = run_cli("admin", "group", "dlq", "cg-dlq", "--registry", registry)
            return out.stdout if out.returncode == 0 and "1 dead letter" in out.stdout else ""

        wait_until(listed, "the dead letter in the CLI's list")
        assert [s["reconsume_times"] for s in listener.of(b"bad")] == [0, 1, 2]
        assert "topic poison reconsumed 2" in listed() and "body=b'bad'" in listed()
        # nobody may consume the DLQ itself
        with PullConsumer(registry, "dlq-reader") as puller:
            assert puller.queues("%DLQ%cg-dlq") == []  # no readable queue in its route
        channel, stub = broker_stub(delay_cluster)
        with channel, pytest.raises(grpc.RpcError) as caught:
            stub.PullMessage(
                broker_pb2.BrokerPullRequest(
                    consumer_group="dlq-reader", topic="%DLQ%cg-dlq", queue_id=0
                ),
                timeout=5,
            )
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        healthy.set()
        resent = run_cli("admin", "group", "dlq", "cg-dlq", "--resend", "--registry", registry)
        assert resent.returncode == 0, resent.stderr
        assert "resent" in resent.stdout and "to poison/" in resent.stdout
        wait_until(lambda: len(listener.of(b"bad")) == 4, "the resent dead letter")
        assert listener.of(b"bad")[-1]["reconsume_times"] == 0
    finally:
        c.shutdown()
    bad_group = run_cli("admin", "group", "dlq", "no/such", "--registry", registry)
    assert bad_group.returncode == 1 and "Traceback" not in bad_group.stderr
    assert "group" in bad_group.stderr


def test_send_back_refuses_unknown_offsets_and_bad_groups(
    delay_cluster: DelayCluster, producer: Producer
) -> None:
    producer.send(Message(topic="sb", body=b"x"))
    channel, stub = broker_stub(delay_cluster)
    try:
        cases: list[tuple[dict[str, Any], grpc.StatusCode, str]] = [
            (dict(group="g", commitlog_offset=10**12), grpc.StatusCode.NOT_FOUND, "no message"),
            (dict(group="../etc", commitlog_offset=0), grpc.StatusCode.INVALID_ARGUMENT, "group"),
            (dict(group="", commitlog_offset=0), grpc.StatusCode.INVALID_ARGUMENT, "group"),
            (
                dict(group="g", commitlog_offset=-1),
                grpc.StatusCode.INVALID_ARGUMENT,
                "commitlog_offset",
            ),
            (
                dict(group="g", commitlog_offset=0, delay_level=99),
                grpc.StatusCode.INVALID_ARGUMENT,
                "delay_level",
            ),
        ]
        for fields, code, fragment in cases:
            with pytest.raises(grpc.RpcError) as caught:
                stub.ConsumerSendBack(broker_pb2.ConsumerSendBackRequest(**fields), timeout=5)
            assert caught.value.code() == code, fields
            assert fragment in caught.value.details(), caught.value.details()
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListDeadLetters(broker_pb2.ListDeadLettersRequest(group="nobody"), timeout=5)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()


def test_orderly_consumers_retry_in_place(delay_cluster: DelayCluster, producer: Producer) -> None:
    failures = {"left": 2}

    def outcome(m: ReceivedMessage) -> bool:
        if bytes(m.body) == b"o-0" and failures["left"]:
            failures["left"] -= 1
            return False
        return True

    listener = Deliveries(outcome)
    for i in range(3):
        producer.send(Message(topic="ordered", body=f"o-{i}".encode()), sharding_key="k")
    options: dict[str, Any] = dict(FAST)
    c = PushConsumer(
        delay_cluster.registry.address,
        "cg-orderly",
        {"ordered": "*"},
        listener,
        options=PushConsumerOptions(orderly=True, **options),
    ).start()
    try:
        wait_until(lambda: listener.bodies()[b"o-2"] == 1, "the whole ordered run")
    finally:
        c.shutdown()
    order = [s["body"] for s in listener.seen]
    assert order == [b"o-0", b"o-0", b"o-0", b"o-1", b"o-2"]  # same message, in place
    assert {s["msg_id"] for s in listener.of(b"o-0")} == {listener.of(b"o-0")[0]["msg_id"]}
