"""BROADCASTING offsets in a local file per client (boltmq/offset_store.py), on two broker
groups: a member stopped (or killed once its file is written) and started again continues
where it stopped; each instance keeps its own file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, PushConsumer, PushConsumerOptions, SendStatus
from boltmq.cli.dev.local_cluster import LocalCluster
from tests.integration.procs import REPO_ROOT
from tests.integration.sdk_fixtures import FAST, Collector
from tests.integration.two_groups import create_topic, registry_of
from tests.integration.two_groups import two_groups as two_groups
from tests.waiting import wait_until

TOPIC = "BroadcastNews"
GROUP = "cg-broadcast"

MEMBER_SCRIPT = """
import signal, sys, threading, time
from boltmq import PushConsumer, PushConsumerOptions

registry, topic, group, directory, instance = sys.argv[1:6]
lock = threading.Lock()
stop = threading.Event()

def listener(messages):
    with lock:
        for m in messages:
            sys.stdout.write("GOT " + bytes(m.body).decode() + "\\n")
        sys.stdout.flush()

signal.signal(signal.SIGTERM, lambda *_: stop.set())
consumer = PushConsumer(registry, group, {topic: "*"}, listener, options=PushConsumerOptions(
    model="BROADCASTING", offset_store_dir=directory, instance_name=instance,
    rebalance_interval_ms=300, long_poll_ms=2000, commit_interval_ms=200)).start()
with lock:
    sys.stdout.write("STARTED %d\\n" % len(consumer.assigned))
    sys.stdout.flush()
stop.wait()
consumer.shutdown()
"""


class Member:
    """A BROADCASTING PushConsumer in its own process; its stdout lines collected."""

    def __init__(self, cluster: LocalCluster, directory: Path, instance: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        args = [registry_of(cluster), TOPIC, GROUP, str(directory), instance]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MEMBER_SCRIPT, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(lambda: any(s.startswith("STARTED") for s in self.lines), "the member")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def got(self) -> Counter[bytes]:
        return Counter(s[4:].encode() for s in self.lines if s.startswith("GOT "))

    def stop(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(30)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def topic(two_groups: LocalCluster) -> Iterator[str]:
    create_topic(two_groups, TOPIC)
    yield TOPIC


def send(cluster: LocalCluster, prefix: str, count: int) -> set[bytes]:
    bodies = [f"{prefix}-{n:02d}".encode() for n in range(count)]
    with Producer(registry_of(cluster), "pg-broadcast") as producer:
        results = [producer.send(Message(topic=TOPIC, body=b)) for b in bodies]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    return set(bodies)


def stored(path: Path) -> dict[tuple[str, str, int], int]:
    """The offsets in a member's file, by (topic, broker_name, queue_id)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {(e["topic"], e["broker_name"], e["queue_id"]): e["offset"] for e in document["offsets"]}


def test_a_restarted_member_continues_where_it_stopped(
    two_groups: LocalCluster, topic: str, tmp_path: Path
) -> None:
    first_batch = send(two_groups, "a", 12)
    file = tmp_path / "member-1" / GROUP / "offsets.json"
    other = Collector()  # a second instance, its own file: it still gets everything
    other_member = PushConsumer(
        registry_of(two_groups), GROUP, {TOPIC: "*"}, other,
        options=PushConsumerOptions(
            **FAST, model="BROADCASTING", offset_store_dir=str(tmp_path), instance_name="member-2"
        ),
    ).start()  # fmt: skip
    try:
        member = Member(two_groups, tmp_path, "member-1")
        wait_until(lambda: set(member.got()) == first_batch, "the first batch")
        member.stop(signal.SIGTERM)  # shutdown writes the file
        assert sum(stored(file).values()) == len(first_batch)
        assert {broker for _, broker, _ in stored(file)} == {"broker-a", "broker-b"}

        second_batch = send(two_groups, "b", 12)  # while the member is down
        member = Member(two_groups, tmp_path, "member-1")
        wait_until(lambda: set(member.got()) == second_batch, "the second batch after a restart")
        # written every commit interval: once it holds everything, a kill loses nothing
        wait_until(
            lambda: sum(stored(file).values()) == len(first_batch | second_batch),
            "the file to hold the second batch",
        )
        member.stop(signal.SIGKILL)
        assert set(member.got()) == second_batch  # nothing of the first batch again

        third_batch = send(two_groups, "c", 8)
        member = Member(two_groups, tmp_path, "member-1")
        wait_until(lambda: set(member.got()) == third_batch, "the third batch after a kill")
        member.stop(signal.SIGTERM)
        assert set(member.got()) == third_batch
        other.wait_for(first_batch | second_batch | third_batch, "the other instance")
        assert Counter(other.bodies()) == Counter(first_batch | second_batch | third_batch)
    finally:
        other_member.shutdown()
    assert sum(stored(tmp_path / "member-2" / GROUP / "offsets.json").values()) == 32
    assert not list(file.parent.glob(".offsets-*"))  # no temporary file left behind


def test_an_unreadable_file_is_ignored_and_replaced(
    two_groups: LocalCluster, topic: str, tmp_path: Path
) -> None:
    file = tmp_path / "member-3" / GROUP / "offsets.json"
    file.parent.mkdir(parents=True)
    file.write_text("{not json", encoding="utf-8")
    got = Collector()
    consumer = PushConsumer(
        registry_of(two_groups), GROUP, {TOPIC: "*"}, got,
        options=PushConsumerOptions(
            **FAST, model="BROADCASTING", consume_from="LAST", offset_store_dir=str(tmp_path),
            instance_name="member-3",
        ),
    ).start()  # fmt: skip
    try:
        fresh = send(two_groups, "d", 4)
        got.wait_for(fresh, "messages sent after the start")
        assert set(got.bodies()) == fresh  # consume_from LAST: nothing older
    finally:
        consumer.shutdown()
    assert len(stored(file)) == 4  # two queues on each group, written whole again


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="instance_name"):
        PushConsumerOptions(model="BROADCASTING", instance_name="../escape")
    with pytest.raises(ValueError, match="instance_name"):
        PushConsumerOptions(instance_name="")
