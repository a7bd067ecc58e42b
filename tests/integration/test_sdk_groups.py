"""Consumer groups end to end: queues split between members, taken over, broadcast.

One member may be a PushConsumer in a child process, killed without a goodbye:
the broker must expire it and hand its queues to the survivor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from boltmq import MessageQueue, Producer, PushConsumer
from tests.integration.conftest import Cluster
from tests.integration.procs import REPO_ROOT
from tests.integration.sdk_fixtures import QUEUES, Collector, bodies, send_all
from tests.integration.sdk_fixtures import consumers as consumers
from tests.integration.sdk_fixtures import producer as producer
from tests.waiting import wait_until


def test_two_consumers_split_the_queues_and_one_takes_over_after_a_shutdown(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    send_all(producer, "shared", [b"seed"])  # creates the topic with 4 queues
    first, second = Collector(), Collector()
    c1 = consumers("cg-split", {"shared": "*"}, first)
    c2 = consumers("cg-split", {"shared": "*"}, second)
    every = {MessageQueue("shared", "broker-a", q) for q in range(QUEUES)}
    wait_until(
        lambda: len(c1.assigned) == len(c2.assigned) == QUEUES // 2,
        "the two members to share the queues",
    )
    assert not set(c1.assigned) & set(c2.assigned)
    assert set(c1.assigned) | set(c2.assigned) == every

    before = bodies("before", 40)
    send_all(producer, "shared", before)
    wait_until(
        lambda: set(before) <= set(first.bodies()) | set(second.bodies()),
        "the group to consume everything",
    )
    assert first.bodies() and second.bodies()  # both members consumed
    assert {g.queue_id for g in first.got if g.body != b"seed"} <= {q.queue_id for q in c1.assigned}

    c2.shutdown()
    wait_until(lambda: set(c1.assigned) == every, "the survivor to own every queue")
    after = bodies("after", 40)
    send_all(producer, "shared", after)
    first.wait_for(set(after), "the survivor to consume the whole topic")


CONSUMER_SCRIPT = """
import sys, threading, time
from boltmq import PushConsumer, PushConsumerOptions

registry, topic, group = sys.argv[1:4]
lock = threading.Lock()  # whole lines: the listener and the main thread both write

def say(line):
    with lock:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()

def listener(messages):
    for m in messages:
        say("GOT " + bytes(m.body).decode())

consumer = PushConsumer(registry, group, {topic: "*"}, listener, options=PushConsumerOptions(
    rebalance_interval_ms=300, long_poll_ms=2000, commit_interval_ms=200))
consumer.start()
while True:
    say("ASSIGNED " + str(len(consumer.assigned)))
    time.sleep(0.1)
"""


class ConsumerProcess:
    """A PushConsumer in its own process, its stdout lines collected by a thread."""

    def __init__(self, registry: str, topic: str, group: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER_SCRIPT, registry, topic, group],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def assigned(self) -> int:
        counts = [int(line.split()[1]) for line in self.lines if line.startswith("ASSIGNED")]
        return counts[-1] if counts else 0

    def got(self) -> set[bytes]:
        return {line[4:].encode() for line in self.lines if line.startswith("GOT ")}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()  # else its pipe is left to the garbage collector


def test_a_killed_member_is_expired_by_the_broker_and_its_queues_taken_over(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    send_all(producer, "crash", [b"seed"])
    survivor = Collector()
    other = ConsumerProcess(cluster.registry.address, "crash", "cg-crash")
    try:
        c1 = consumers("cg-crash", {"crash": "*"}, survivor)
        wait_until(
            lambda: len(c1.assigned) == QUEUES // 2 and other.assigned() == QUEUES // 2,
            "the in-process and the child consumer to share the queues",
        )
        before = bodies("before", 40)
        send_all(producer, "crash", before)
        wait_until(
            lambda: set(before) <= set(survivor.bodies()) | other.got(),
            "the two members to consume everything",
        )
        assert other.got(), "the child consumer consumed nothing"
    finally:
        other.kill()  # SIGKILL: no unregister, no last commit; only expiry removes it

    wait_until(lambda: len(c1.assigned) == QUEUES, "the survivor to own every queue")
    after = bodies("after", 40)
    send_all(producer, "crash", after)
    survivor.wait_for(set(after), "the survivor to consume the dead member's queues")


def test_broadcasting_delivers_every_message_to_every_member(
    producer: Producer, consumers: Callable[..., PushConsumer], tmp_path: Path
) -> None:
    send_all(producer, "news", [b"seed"])
    members = [Collector() for _ in range(3)]
    started = [
        consumers(
            "cg-news", {"news": "*"}, m, model="BROADCASTING",
            offset_store_dir=str(tmp_path), instance_name=f"member-{n}",
        )
        for n, m in enumerate(members)
    ]  # fmt: skip
    wait_until(
        lambda: all(len(c.assigned) == QUEUES for c in started), "every member to read every queue"
    )
    sent = bodies("news", 30)
    send_all(producer, "news", sent)
    for member in members:
        member.wait_for(set(sent) | {b"seed"}, "a broadcast member")
        assert Counter(member.bodies()) == Counter(set(sent) | {b"seed"})


def test_a_joining_member_reads_its_queues_twice_only_until_the_old_owner_rebalances(
    producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    """The bound on duplicates without any fault (docs/reliability.md, duplicates).

    A member takes its share at start; a member started before it gives those
    queues up only at its own next rebalance (here: only when told, the interval
    being ten minutes). Until then both read the moved queues: exactly the
    messages of those queues arrive twice, no other. Once the old owner has
    rebalanced, nothing arrives twice.
    """
    send_all(producer, "handover", [b"seed"])
    first, second = Collector(), Collector()
    never = dict(rebalance_interval_ms=600_000)
    c1 = consumers("cg-handover", {"handover": "*"}, first, **never)
    assert len(c1.assigned) == QUEUES
    c2 = consumers("cg-handover", {"handover": "*"}, second, **never)
    moved = {q.queue_id for q in c2.assigned}
    assert len(moved) == QUEUES // 2 and len(c1.assigned) == QUEUES  # not given up yet

    window = bodies("window", 40)
    send_all(producer, "handover", window)
    first.wait_for(set(window), "the old owner to read every queue")
    on_moved = {g.body for g in first.got if g.queue_id in moved and g.body in set(window)}
    second.wait_for(on_moved, "the new owner to read its queues")
    twice = set(first.bodies()) & set(second.bodies()) & set(window)
    assert twice == on_moved and on_moved  # the moved queues' messages, and only those

    c1.rebalance()
    assert not set(c1.assigned) & set(c2.assigned)
    seen = len(first.got), len(second.got)
    after = bodies("after", 40)
    send_all(producer, "handover", after)
    wait_until(
        lambda: set(after) <= set(first.bodies()) | set(second.bodies()),
        "the group to consume everything",
    )
    late = [g.body for g in first.got[seen[0] :] + second.got[seen[1] :] if g.body in set(after)]
    assert Counter(late) == Counter(after)  # each exactly once
