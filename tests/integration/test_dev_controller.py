"""``boltmq dev --controller etcd``: a local cluster whose masters etcd elects.

The command starts its own etcd (Debian's etcd-server), a SYNC_MASTER and a replica
with their HA services voting through it. The test sends, kills the master's store,
HA service and broker with SIGKILL (as a lost machine would), and sends again without
any command: the replica is elected, everything acknowledged before the kill is
there, and ``dev`` keeps running, reports the dead processes and stops cleanly.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer
from boltmq.pull_consumer import PullConsumer
from tests.integration.test_dev import Dev
from tests.waiting import wait_until

TOPIC = "Elected"
FAILOVER_WAIT_S = 90.0
"""Bound on the election and the routes following it (about 5 s with the 3 s lease)."""


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    flags = ("--ha-port", "0", "--replicas", "1", "--role", "SYNC_MASTER")
    started = Dev(tmp_path / "data", *flags, "--controller", "etcd")
    yield started
    started.kill()


def pids_with(argument: str) -> list[int]:
    """Processes with ``argument`` as one word of their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in words:
            found.append(int(entry.name))
    return found


def send_when_possible(producer: Producer, body: bytes) -> None:
    deadline = time.monotonic() + FAILOVER_WAIT_S
    while True:
        try:
            if producer.send(Message(topic=TOPIC, body=body)).status.name == "SEND_OK":
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_a_killed_master_is_replaced_without_a_command(dev: Dev) -> None:
    endpoints = dev.wait_ready()
    assert any(line.startswith("etcd ") for line in dev.banner), dev.banner
    registry = endpoints["registry"]
    with Producer(registry) as producer:
        for i in range(5):
            send_when_possible(producer, f"before-{i}".encode())  # SYNC_MASTER: replica has it

    master_store = dev.groups["broker-a"]["store"]
    victims = pids_with(f"root_dir={dev.data_dir / 'store'}") + pids_with(
        f"store_address={master_store}"
    )
    assert len(victims) == 3, victims  # store, HA service, broker
    for pid in victims:
        os.kill(pid, signal.SIGKILL)

    with Producer(registry) as producer:
        send_when_possible(producer, b"after")
    with PullConsumer(registry, "elected-group") as consumer:

        def bodies() -> set[bytes]:
            return {
                bytes(m.body)
                for queue in consumer.queues(TOPIC)
                for m in consumer.pull(queue, 0, 64).messages
            }

        wait_until(
            lambda: {f"before-{i}".encode() for i in range(5)} | {b"after"} <= bodies(),
            "every acknowledged message on the elected master",
        )
    code, out, err = dev.stop(signal.SIGINT)
    assert code == 0, (out, err)
    assert out.count("exited; the others keep serving") == 3, out
    assert "cluster stopped cleanly" in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--controller", "etcd"), "add --replicas"),
        (("--etcd", "127.0.0.1:2379"), "give both or neither"),
    ],
)
def test_controller_flags_that_cannot_work_are_refused(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    refused = Dev(tmp_path / "data", *flags)
    code, _out, err = refused.stop(signal.SIGCONT)  # no signal needed: it exits at once
    assert code == 1 and message in err, err
