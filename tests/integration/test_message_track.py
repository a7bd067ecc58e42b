"""Message track (``TrackMessage``, ``boltmq admin message track``) on two broker groups,
following one message through four consumer groups: consumed, filtered out, waiting in
a busy listener, and failing every time: RETRYING through the default 16 retries, whose
growing delays are compressed by configuration (``message_delay_level`` of 18 levels
from 10 ms to 180 ms: every level is still used, in order), then DEAD_LETTERED."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from boltmq import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    SendStatus,
)
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS
from tests.integration.sdk_fixtures import FAST
from tests.integration.test_cli import run_cli
from tests.integration.two_groups import create_topic, registry_of
from tests.waiting import wait_until

LEVELS_MS = tuple(10 * n for n in range(1, 19))
"""18 growing levels, 10 ms .. 180 ms: retry k (0-based) waits level 3 + k."""
TOPIC = "Tracked"
RETRIES = 16
"""The default retry_max_times: the 17th failure dead-letters the message."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    levels = " ".join(f"{ms}ms" for ms in LEVELS_MS)
    spec = ClusterSpec(
        tmp_path_factory.mktemp("track"),
        groups=2,
        store_settings=CLUSTER_STORE_SETTINGS,
        broker_settings=(*CLUSTER_BROKER_SETTINGS, f"message_delay_level={levels}"),
    )
    started = LocalCluster(spec).start()
    try:
        create_topic(started, TOPIC)
        yield started
    finally:
        started.stop()


class Listener:
    """Records each delivery's time and reconsume count; answers with ``outcome``."""

    def __init__(self, outcome: ConsumeResult, hold: threading.Event | None = None) -> None:
        self.outcome, self.hold = outcome, hold
        self.deliveries: list[tuple[float, int]] = []

    def __call__(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        self.deliveries += [(time.monotonic(), m.reconsume_times) for m in messages]
        if self.hold is not None:
            self.hold.wait(60)
        return self.outcome


def tracks(cluster: LocalCluster, broker_name: str, msg_id: str) -> dict[str, tuple[str, str]]:
    """group -> (state name, detail) as the message's broker tracks it."""
    broker = cluster.groups[broker_name][0].broker
    assert broker is not None
    channel = sync_channel(broker.address)
    try:
        answer = broker_pb2_grpc.BrokerServiceStub(channel).TrackMessage(
            broker_pb2.TrackMessageRequest(msg_id=msg_id), timeout=10
        )
    finally:
        channel.close()
    return {t.group: (broker_pb2.TrackState.Name(t.state), t.detail) for t in answer.tracks}


def test_a_message_tracked_through_consumed_filtered_waiting_retrying_and_dead_lettered(
    cluster: LocalCluster,
) -> None:
    release = threading.Event()
    ok, filtered = Listener(ConsumeResult.SUCCESS), Listener(ConsumeResult.SUCCESS)
    slow = Listener(ConsumeResult.SUCCESS, hold=release)
    poison = Listener(ConsumeResult.RECONSUME_LATER)
    started: list[PushConsumer] = []
    for group, expression, listener in (
        ("cg-ok", "*", ok),
        ("cg-filter", "other", filtered),
        ("cg-slow", "*", slow),
        ("cg-poison", "*", poison),
    ):
        started.append(
            PushConsumer(
                registry_of(cluster), group, {TOPIC: expression}, listener,
                options=PushConsumerOptions(**FAST, consume_batch_max_size=1),
            ).start()
        )  # fmt: skip
    try:
        with Producer(registry_of(cluster), "pg-track") as producer:
            sent = producer.send(Message(topic=TOPIC, body=b"tracked", tags="t"))
        assert sent.status is SendStatus.SEND_OK
        broker, msg_id = sent.queue.broker_name, sent.msg_id

        def state_of(group: str) -> str:
            return tracks(cluster, broker, msg_id).get(group, ("-", ""))[0]

        wait_until(lambda: poison.deliveries, "the first delivery to cg-poison")
        wait_until(lambda: state_of("cg-poison") == "RETRYING", "cg-poison retrying")
        wait_until(lambda: state_of("cg-ok") == "CONSUMED", "cg-ok's commit")
        wait_until(lambda: state_of("cg-filter") == "CONSUMED_BUT_FILTERED", "cg-filter")
        wait_until(lambda: slow.deliveries, "the delivery to cg-slow (its listener holds it)")
        assert state_of("cg-slow") == "NOT_CONSUMED_YET"
        assert not filtered.deliveries

        wait_until(lambda: state_of("cg-poison") == "DEAD_LETTERED", "the dead letter", 60)
        assert tracks(cluster, broker, msg_id)["cg-poison"][1] == "in %DLQ%cg-poison"
        # delivered once and retried 16 times, every level in turn, none early
        assert [n for _, n in poison.deliveries] == list(range(RETRIES + 1))
        for k in range(RETRIES):
            gap_ms = (poison.deliveries[k + 1][0] - poison.deliveries[k][0]) * 1000
            assert gap_ms >= LEVELS_MS[2 + k] - 5, (k, gap_ms)  # 5 ms: clock granularity
        time.sleep(0.5)
        assert len(poison.deliveries) == RETRIES + 1  # never delivered again

        release.set()
        wait_until(lambda: state_of("cg-slow") == "CONSUMED", "cg-slow's commit")

        shown = run_cli("admin", "message", "track", msg_id, "--registry", registry_of(cluster))
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].startswith(f"{broker}: {msg_id} {TOPIC}/")
        states = {line.split()[0]: line.split()[1] for line in lines[1:]}
        assert states == {
            "cg-filter": "CONSUMED_BUT_FILTERED",
            "cg-ok": "CONSUMED",
            "cg-poison": "DEAD_LETTERED",
            "cg-slow": "CONSUMED",
        }
        by_unique = run_cli(
            "admin", "message", "track", sent.unique_id, "--topic", TOPIC,
            "--registry", registry_of(cluster),
        )  # fmt: skip
        assert by_unique.returncode == 0, by_unique.stderr
        assert by_unique.stdout == shown.stdout
    finally:
        release.set()
        for consumer in started:
            consumer.shutdown()


def test_bad_ids_are_refused(cluster: LocalCluster) -> None:
    broker = cluster.groups["broker-a"][0].broker
    assert broker is not None
    channel = sync_channel(broker.address)
    stub = broker_pb2_grpc.BrokerServiceStub(channel)
    try:
        for msg_id, code, says in (
            ("", grpc.StatusCode.INVALID_ARGUMENT, "msg_id"),
            ("../etc/passwd", grpc.StatusCode.INVALID_ARGUMENT, "msg_id"),
            ("zz" * 16, grpc.StatusCode.INVALID_ARGUMENT, "not an offset message id"),
            ("7F00000100002AA1" + "0000000100000000", grpc.StatusCode.NOT_FOUND, "no message"),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.TrackMessage(broker_pb2.TrackMessageRequest(msg_id=msg_id), timeout=5)
            assert refused.value.code() is code, msg_id
            assert says in (refused.value.details() or ""), refused.value.details()
    finally:
        channel.close()
    registry = registry_of(cluster)
    for msg_id, says in (("nope nope", "without spaces"), ("ABCDEF", "no message with id ABCDEF")):
        shown = run_cli("admin", "message", "track", msg_id, "--registry", registry)
        assert shown.returncode == 1 and "Traceback" not in shown.stderr
        assert says in shown.stderr, shown.stderr
