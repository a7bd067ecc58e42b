"""The partition suite's clients, run as their own process inside the client's namespace.

``python -m tests.reliability.partition_client OUT_DIR REGISTRY[,REGISTRY...]``

One producer sends orderly messages (``SHARDS`` sharding keys, each with its own
rising sequence number) one at a time, without SDK retries, so every message key
(``hist-<shard>-<seq>``, in ``KEYS``) is sent exactly once; two consumer groups
consume the topic: ``partition-orderly`` (orderly: one queue at a time, in order)
and ``partition-concurrent``. Recorded, as JSON lines in ``OUT_DIR``:

- ``acks.jsonl``: every SEND_OK: ``key``, ``shard``, ``seq``, ``broker``,
  ``queue_id``, ``msg_id``, ``commitlog_offset``;
- ``deliveries.jsonl``: every message a listener got, in the order received:
  ``group``, ``consumer``, ``key``, ``queue_id``, ``queue_offset``.

It produces until ``OUT_DIR/stop`` exists, then keeps consuming until both groups
have every acknowledged key (or ``DRAIN_S`` passed) and writes ``OUT_DIR/done``
(a JSON summary). ``READY`` on stdout once the topic exists and both consumers run.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from boltmq import Message, Producer, PushConsumer
from boltmq.message import ReceivedMessage, SendStatus
from boltmq.options import ProducerOptions, PushConsumerOptions

TOPIC = "PartitionTopic"
SHARDS = 8
GROUPS = ("partition-orderly", "partition-concurrent")
ORDERLY_GROUP = GROUPS[0]
DRAIN_S = 60.0
SEND_PAUSE_S = 0.01


class Recorder:
    """Thread-safe JSON-lines files and the sets of keys seen."""

    def __init__(self, out: Path) -> None:
        self.lock = threading.Lock()
        self.acks = (out / "acks.jsonl").open("a", buffering=1)
        self.deliveries = (out / "deliveries.jsonl").open("a", buffering=1)
        self.acked: set[str] = set()
        self.received: dict[str, set[str]] = {g: set() for g in GROUPS}

    def ack(self, row: dict[str, object]) -> None:
        with self.lock:
            self.acks.write(json.dumps(row) + "\n")
            self.acked.add(str(row["key"]))

    def listener(self, group: str, consumer: str):  # type: ignore[no-untyped-def]
        def on_messages(messages: list[ReceivedMessage]) -> None:
            with self.lock:
                for m in messages:
                    keys = [k for k in m.keys if k.startswith("hist-")]
                    if not keys:
                        continue
                    row = {
                        "group": group,
                        "consumer": consumer,
                        "key": keys[0],
                        "queue_id": m.queue_id,
                        "queue_offset": m.queue_offset,
                    }
                    self.deliveries.write(json.dumps(row) + "\n")
                    self.received[group].add(keys[0])

        return on_messages

    def missing(self) -> int:
        with self.lock:
            return sum(len(self.acked - got) for got in self.received.values())


def produce(producer: Producer, recorder: Recorder, stop: Path) -> Counter[str]:
    """Send until ``stop`` exists; how each send ended, by status (or exception) name."""
    seqs = [0] * SHARDS
    sent = 0
    outcomes: Counter[str] = Counter()
    while not stop.exists():
        shard = sent % SHARDS
        seq = seqs[shard] = seqs[shard] + 1
        key = f"hist-{shard}-{seq}"
        sent += 1
        try:
            result = producer.send(
                Message(topic=TOPIC, body=key.encode(), keys=[key]), sharding_key=f"s{shard}"
            )
        except Exception as exc:  # noqa: BLE001 (a failed send is simply not acknowledged)
            outcomes[type(exc).__name__] += 1
            if outcomes[type(exc).__name__] <= 5 or sent % 100 == 0:
                when = time.strftime("%X")
                print(f"{when} send {key} failed: {exc}", file=sys.stderr, flush=True)
            time.sleep(SEND_PAUSE_S)
            continue
        outcomes[result.status.name] += 1
        if result.status is SendStatus.SEND_OK:
            recorder.ack(
                {
                    "key": key,
                    "shard": f"s{shard}",
                    "seq": seq,
                    "broker": result.queue.broker_name,
                    "queue_id": result.queue.queue_id,
                    "msg_id": result.msg_id,
                    "commitlog_offset": result.commitlog_offset,
                }
            )
        time.sleep(SEND_PAUSE_S)
    return outcomes


def main(out: Path, registries: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(out)
    # Routes refreshed every second: a failover shows within one (a sharded send stays
    # on its queue, so a stale route would keep it on a deposed master).
    options = ProducerOptions(send_timeout_ms=3_000, retry_times=0, route_refresh_ms=1_000)
    with Producer(registries, "partition-producer", options=options) as producer:
        deadline = time.monotonic() + 60
        while True:  # the topic is created on the first send that gets through
            try:
                producer.send(Message(topic=TOPIC, body=b"warm-up"))
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        consumers = [
            PushConsumer(
                registries,
                group,
                {TOPIC: "*"},
                recorder.listener(group, f"{group}-0"),
                options=PushConsumerOptions(
                    orderly=group == ORDERLY_GROUP, rebalance_interval_ms=2_000
                ),
            ).start()
            for group in GROUPS
        ]
        print("READY", flush=True)
        outcomes = produce(producer, recorder, out / "stop")
        deadline = time.monotonic() + DRAIN_S
        while recorder.missing() and time.monotonic() < deadline:
            time.sleep(0.5)
        for consumer in consumers:
            consumer.shutdown()
    summary = {
        "sent": sum(outcomes.values()),
        "outcomes": dict(outcomes),
        "acked": len(recorder.acked),
        "missing": recorder.missing(),
    }
    (out / "done").write_text(json.dumps(summary))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2].split(","))
