"""A broker serving its store in one process: ``boltmq dev --colocate``
(``boltmq serve broker --with-store`` for each group).

The cluster runs as real processes on free ports. What is checked: no store
process is started (the broker's process serves both); messages sent and
consumed through the broker are in the store, which still answers on its own
port over gRPC; SIGTERM stops the broker and then its store cleanly (no abort
file) and frees both ports; a restart finds the messages; the broker's metrics
port exports the store's metrics beside its own. Refused: a
co-located cluster with replicas, the store flags without ``--with-store``,
``--with-store`` on anything but a broker.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from boltmq import Message, Producer
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import store_pb2, store_pb2_grpc
from tests.integration.procs import REPO_ROOT
from tests.integration.test_dev import Dev, _cli, consume, refuses_connections
from tests.integration.test_metrics import free_port, scrape, value

BODIES = [f"c{i}".encode() for i in range(20)]


def test_colocated_brokers_serve_their_stores_and_stop_them_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    dev = Dev(data, "--colocate", "--broker-groups", "2", "--no-console")
    try:
        endpoints = dev.wait_ready()
        assert endpoints["store"] != endpoints["broker"]
        assert set(dev.groups) == {"broker-a", "broker-b"}
        logs = sorted(p.name.split("-")[0] for p in (data / "logs").glob("*.log"))
        assert "store" not in logs and logs.count("broker") == 2, logs  # no store process
        registry = endpoints["registry"]

        with Producer(registry, "co-pg") as producer:
            sent = [producer.send(Message(topic="CoTopic", body=body)) for body in BODIES]
        assert len({r.msg_id for r in sent}) == len(BODIES)
        assert sorted(consume(registry, "CoTopic", "co-cg", len(BODIES))) == sorted(BODIES)

        stored = 0
        for group in dev.groups.values():  # each store answers on its own port too
            with sync_channel(group["store"]) as channel:
                info = store_pb2_grpc.StoreServiceStub(channel).GetStoreInfo(
                    store_pb2.GetStoreInfoRequest(), timeout=30
                )
            assert info.role == "MASTER"
            stored += info.commitlog_max_offset
        assert stored > sum(len(b) for b in BODIES)

        code, out, err = dev.stop(signal.SIGTERM)
        assert code == 0, err
        assert out.strip().splitlines()[-1] == "cluster stopped cleanly"
        assert not (data / "store" / "abort").exists(), "the store did not shut down cleanly"
        assert not (data / "broker-b" / "store" / "abort").exists()
        assert all(
            refuses_connections(address) for g in dev.groups.values() for address in g.values()
        )
    finally:
        dev.kill()

    again = Dev(data, "--colocate", "--broker-groups", "2", "--no-console")
    try:
        registry = again.wait_ready()["registry"]
        assert sorted(consume(registry, "CoTopic", "co-later", len(BODIES))) == sorted(BODIES)
        code, _, err = again.stop(signal.SIGTERM)
        assert code == 0, err
    finally:
        again.kill()


def test_colocation_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    replicas = _cli(
        "dev", "--colocate", "--replicas", "1", "--data-dir", str(tmp_path / "d"), env=env
    )
    assert replicas.returncode != 0 and "without replicas" in replicas.stderr
    assert not (tmp_path / "d" / "store").exists()  # refused before anything started

    loose = _cli("serve", "broker", "--store-set", f"root_dir={tmp_path / 's'}", env=env)
    assert loose.returncode == 2 and "need --with-store" in loose.stderr

    wrong = _cli("serve", "store", "--with-store", "--port", "0", env=env)
    assert wrong.returncode == 2 and "serves a broker's store; not store's" in wrong.stderr


def test_the_brokers_metrics_port_exports_its_stores_metrics_too(tmp_path: Path) -> None:
    port = free_port()
    dev = Dev(
        tmp_path / "data", "--colocate", "--no-console", "--broker-set", f"metrics_port={port}"
    )
    try:
        registry = dev.wait_ready()["registry"]
        with Producer(registry, "co-metrics") as producer:
            for body in BODIES:
                producer.send(Message(topic="Metered", body=body))
        samples = scrape(port)
        assert value(samples, "boltmq_broker_in_messages_total", topic="Metered") == len(BODIES)
        assert value(samples, "boltmq_store_put_messages_total") >= len(BODIES)
        code, _, err = dev.stop(signal.SIGTERM)
        assert code == 0, err
    finally:
        dev.kill()
