"""RabbitMQ in ``python -m bench.compare``: Debian's rabbitmq-server, stream queues, aio-pika.

Runs only where ``rabbitmq-server`` is installed (``make bench-peers`` installs it;
``make test`` does not need it). The checks are on what the rows are made of (real
message counts, every scenario present) and on the node leaving nothing running,
never on how fast anything was.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from bench.compare.rabbitmq_peer import RabbitMQPeer
from bench.compare.run import compare
from bench.compare.workload import CONCURRENT, Workload

pytest.importorskip("aio_pika", reason="aio-pika is in the bench extra")
if shutil.which("rabbitmq-server") is None:
    pytest.skip(
        "rabbitmq-server is not installed (make bench-peers, or apt-get install -y "
        "rabbitmq-server)",
        allow_module_level=True,
    )

CONSUME = 1500


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_rabbitmq_runs_every_scenario_and_stops(tmp_path: Path) -> None:
    result = compare(
        ["rabbitmq"],
        Workload(seconds=0.3, consume_messages=CONSUME, topic_counts=(2,), producer_counts=(1,)),
        workdir=tmp_path,
    )
    assert not result.skipped
    assert {(r.scenario, r.mode) for r in result.rows} == {
        ("produce", "batched"),
        ("produce", "one-at-a-time"),
        ("produce", CONCURRENT),
        ("consume", "batched"),
        ("produce+consume", "batched"),
    }
    assert all(r.system == "RabbitMQ" and r.messages > 0 for r in result.rows)
    (consumed,) = [r for r in result.rows if r.scenario == "consume"]
    assert consumed.messages >= CONSUME
    assert "stream queues" in result.durability["RabbitMQ"]
    assert list(tmp_path.iterdir()) == []  # the node's directory went with the round


def test_the_node_and_its_epmd_are_gone_after_stop(tmp_path: Path) -> None:
    peer = RabbitMQPeer()
    peer.start(tmp_path)
    port = int(peer.url.rsplit(":", 1)[1].strip("/"))
    assert peer.create_topics("t", 1) == ["t-0"]
    assert peer.epmd is not None and peer.server is not None
    peer.stop()
    assert peer.server.returncode is not None and peer.epmd.returncode is not None
    assert not _listening(port)


def test_a_missing_rabbitmq_is_skipped_with_the_apt_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda program: None)
    result = compare(["rabbitmq"], Workload(seconds=0.1, topic_counts=(1,), producer_counts=(1,)))
    assert result.rows == []
    assert "apt-get install -y rabbitmq-server" in result.skipped["RabbitMQ"]
