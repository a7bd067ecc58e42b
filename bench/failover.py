"""``python -m bench.failover``: how long a broker group is without a master after a kill -9.

Each round starts a real etcd (:class:`boltmq.cli.etcd_server.EtcdServer`) and a
group of two members as ``boltmq dev --replicas 1 --role SYNC_MASTER`` does
(registry, 2 stores, 2 HA services with ``controller_endpoints``, 2 brokers; default
intervals), waits until the controller has elected the master and the replica
follows, and sends one message at a time through the SDK (no retries,
``--send-timeout-ms``) until the replica's broker has copied the topic. Then it
kills the master's store and HA service with SIGKILL and keeps sending. Printed
per round:

- ``gap``: seconds from the kill to the end of the first send acknowledged after
  it (by the new master: SEND_OK, or SLAVE_NOT_AVAILABLE as it has no replica);
- ``failed``: sends that failed in between (errors and timeouts);
- the new master's epoch.

It prints numbers and asserts nothing (docs/ha.md, "Automatic failover").
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from boltmq import Message, Producer, ProducerOptions
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.cli.etcd_server import EtcdServer
from boltmq.kernel.channels import sync_channel
from boltmq.message import SendStatus
from boltmq.producer import SendError
from boltmq.v1 import broker_pb2, broker_pb2_grpc, store_pb2, store_pb2_grpc

TOPIC = "FailoverBench"
WAIT_S = 60.0
STORE_SETTINGS = (
    "mapped_file_size_commitlog=4194304",
    "max_hash_slot_num=5000",
    "max_index_num=20000",
    "slave_timeout_ms=1000",
    "disk_max_used_space_ratio=100",
    "disk_space_clean_forcibly_ratio=100",
    "disk_space_warning_level_ratio=100",
)
BROKER_SETTINGS = ("metadata_sync_interval_ms=1000",)
"""The replica's broker copies the topic within a second (the run waits for it); every
other interval, the HA services' and the registry's, is the default."""
ACKNOWLEDGED = (SendStatus.SEND_OK, SendStatus.SLAVE_NOT_AVAILABLE)


@dataclass
class Sends:
    """Every send's end time and whether it was acknowledged, in order."""

    results: list[tuple[float, bool]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    """How often each failure's text (addresses and offsets elided) was seen."""
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, registry: str, timeout_ms: int) -> None:
        options = ProducerOptions(retry_times=0, send_timeout_ms=timeout_ms)
        with Producer(registry, group="pg-failover-bench", options=options) as producer:
            i = 0
            while not self.stop.is_set():
                try:
                    ok = producer.send(Message(topic=TOPIC, body=b"m%d" % i)).status
                    acked = ok in ACKNOWLEDGED
                except SendError as exc:
                    acked = False
                    self.errors[re.sub(r"[0-9.]+:[0-9]+|\d+", "N", str(exc))[:160]] += 1
                self.results.append((time.monotonic(), acked))
                i += 1

    def after(self, killed_at: float) -> tuple[float, int] | None:
        """(seconds to the first acknowledgement after ``killed_at``, failures before it)."""
        failed = 0
        for ended, acked in list(self.results):
            if ended <= killed_at:
                continue
            if acked:
                return ended - killed_at, failed
            failed += 1
        return None


def _info(address: str) -> store_pb2.StoreInfo:
    with sync_channel(address) as channel:
        info: store_pb2.StoreInfo = store_pb2_grpc.StoreServiceStub(channel).GetStoreInfo(
            store_pb2.GetStoreInfoRequest(), timeout=5
        )
        return info


def _topics(broker: str) -> set[str]:
    with sync_channel(broker) as channel:
        answer = broker_pb2_grpc.BrokerServiceStub(channel).ListTopics(
            broker_pb2.ListTopicsRequest(), timeout=5
        )
    return {t.name for t in answer.topics}


def _wait(condition: object, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except grpc.RpcError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting until {what}")


def one_round(scratch: Path, lease_ms: int, send_timeout_ms: int) -> tuple[float, int, int, Sends]:
    """(gap seconds, failed sends, new epoch, every send) of one kill -9 of the master."""
    etcd = EtcdServer(scratch / "etcd").start()
    spec = ClusterSpec(
        scratch / "cluster",
        replicas=1,
        master_role="SYNC_MASTER",
        store_settings=STORE_SETTINGS,
        broker_settings=BROKER_SETTINGS,
        ha_settings=(f"controller_endpoints={etcd.endpoint}", f"controller_lease_ms={lease_ms}"),
    )
    cluster = LocalCluster(spec)
    sends = Sends()
    sender = threading.Thread(target=lambda: None)
    try:
        cluster.start()
        assert cluster.registry is not None
        master, replica = cluster.members
        _wait(lambda: bool(_info(master.store.address).replicas), "the master is elected")
        sender = threading.Thread(
            target=sends.run, args=(cluster.registry.address, send_timeout_ms)
        )
        sender.start()
        _wait(lambda: sum(a for _, a in sends.results) >= 50, "50 sends are acknowledged")
        assert replica.broker is not None
        replica_broker = replica.broker.address
        _wait(lambda: TOPIC in _topics(replica_broker), "the replica's broker has the topic")
        assert master.ha is not None
        killed_at = time.monotonic()
        master.store.kill()
        master.ha.kill()
        _wait(lambda: sends.after(killed_at) is not None, "a send is acknowledged again")
        gap = sends.after(killed_at)
        assert gap is not None
        return gap[0], gap[1], _info(replica.store.address).epoch, sends
    finally:
        sends.stop.set()
        if sender.is_alive():
            sender.join(timeout=30)
        cluster.stop()
        etcd.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lease-ms", type=int, default=3000, help="controller_lease_ms")
    parser.add_argument("--send-timeout-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.send_timeout_ms < 1:
        parser.error("--rounds and --send-timeout-ms must be positive")
    gaps = []
    for round_no in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="boltmq-failover-") as scratch:
            gap, failed, epoch, sends = one_round(
                Path(scratch), args.lease_ms, args.send_timeout_ms
            )
        gaps.append(gap)
        print(
            f"round {round_no}: lease {args.lease_ms} ms: first acknowledged send "
            f"{gap:.2f} s after the kill -9, {failed} sends failed in between, "
            f"new master epoch {epoch}",
            flush=True,
        )
        for text, count in sends.errors.most_common(3):
            print(f"  {count} x {text}")
    print(f"median gap {statistics.median(gaps):.2f} s over {len(gaps)} rounds")


if __name__ == "__main__":
    main()
