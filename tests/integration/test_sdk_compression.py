"""Body compression end to end: a producer compresses long bodies, the store keeps them
compressed, consumers and ``boltmq store inspect`` give the original back.

What an application sees: the body it sent, byte for byte, from a PushConsumer and a
PullConsumer; what the store holds: a record much smaller than the body, with the
COMPRESSED and ZLIB sys-flag bits (0x301); a short body stored as it is. A record
whose compressed body does not inflate is a per-message error (CorruptBody when its
body is read), which a push consumer's listener turns into a failed message while the
consume thread goes on with the others.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boltmq import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    Producer,
    ProducerOptions,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendStatus,
    TransactionProducer,
)
from boltmq.cli.inspect_store import BODY_PREVIEW_BYTES
from boltmq.wire.body_compression import ZLIB_SYS_FLAG, CorruptBody, InflatingRecordView
from boltmq.wire.record import SYS_FLAG_OFFSET
from boltmq.wire.record_batch import send_record_parts
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import Collector, pull_everything
from tests.integration.sdk_fixtures import consumers as consumers
from tests.integration.sdk_fixtures import producer as producer
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
BIG = 100 * 1024


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The standard cluster with retries within a second (the bad body's are)."""
    started = Cluster(tmp_path, ("message_delay_level=100ms 200ms 300ms 400ms",))
    yield started
    started.stop()


def compressible(seed: int, size: int = BIG) -> bytes:
    """``size`` bytes of words from a small vocabulary: zlib makes them several times smaller."""
    rng = random.Random(seed)
    words = [b"order", b"paid", b"shipped", b"customer", b"sku-%d" % seed, b"eur", b"12.50"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def _by_body(messages: list[ReceivedMessage]) -> dict[bytes, ReceivedMessage]:
    return {bytes(m.body): m for m in messages}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOLTMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _inspect(cluster: Cluster, records: int) -> str:
    """``boltmq store inspect`` of the stopped store, as a subprocess (the broker stops
    first: stopped after its store, it would wait out its store deadline saving offsets)."""
    cluster.broker.stop()
    cluster.store.stop()
    proc = _cli("store", "inspect", str(cluster.root_dir), "--records", str(records))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_long_bodies_are_stored_compressed_and_come_back_whole(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    big, small = compressible(1), b"short body"
    mixed = [compressible(2), b"small-in-batch", compressible(3)]
    assert producer.send(Message(topic="zipped", body=big)).status is SendStatus.SEND_OK
    assert producer.send(Message(topic="zipped", body=small)).status is SendStatus.SEND_OK
    batch = producer.send_batch([Message(topic="zipped", body=b, tags="mix") for b in mixed])
    assert {r.status for r in batch} == {SendStatus.SEND_OK}
    async_body = compressible(4)
    producer.send_async(Message(topic="zipped", body=async_body)).result(timeout=30)
    sent = [big, small, *mixed, async_body]

    pulled = _by_body(pull_everything(cluster, "zipped"))
    assert sorted(pulled) == sorted(sent)  # every body back, byte for byte
    for body, message in pulled.items():
        if len(body) > 4096:  # compressed: the stored record is a fraction of the body
            assert message.sys_flag & ZLIB_SYS_FLAG == ZLIB_SYS_FLAG
            assert message.total_size < len(body) // 4
        else:  # stored as it is
            assert message.sys_flag & ZLIB_SYS_FLAG == 0
            assert not isinstance(message, InflatingRecordView)
    assert pulled[b"small-in-batch"].tags == "mix" and pulled[mixed[0]].tags == "mix"

    collector = Collector()
    consumer = consumers("cg-zipped", {"zipped": "*"}, collector)
    collector.wait_for(set(sent), "pushed bodies")
    assert sorted(set(collector.bodies())) == sorted(sent)
    consumer.shutdown()

    out = _inspect(cluster, len(sent))
    lines = [line for line in out.splitlines() if "topic zipped" in line]
    assert len(lines) == len(sent)
    zipped = [line for line in lines if f"body {BIG} bytes (zlib, " in line]
    assert len(zipped) == 4
    previews = {repr(body[:BODY_PREVIEW_BYTES]) for body in sent if len(body) == BIG}
    for line in zipped:
        assert int(line.split("size ")[1].split(",")[0]) < BIG // 4
        assert any(preview in line for preview in previews)  # the inflated body's start
    assert any("body 10 bytes b'short body'" in line for line in lines)


def test_a_transaction_honours_the_compression_threshold_like_a_producer(
    cluster: Cluster,
) -> None:
    """A committed half message is stored compressed exactly when a Producer of the same
    options would store the body compressed: the default threshold (4 KiB) and others."""
    small = compressible(6, 2 * 1024)
    cases = [  # (options, body, topic)
        (None, compressible(5), "zipped-tx"),  # 100 KiB over the default 4 KiB
        (ProducerOptions(compress_body_over=BIG * 2), compressible(5), "unzipped-tx"),
        (ProducerOptions(compress_body_over=1024), small, "small-zipped-tx"),
        (None, small, "small-tx"),  # 2 KiB under the default
    ]
    with pytest.raises(ValueError, match="send_timeout_ms in options"):
        TransactionProducer(
            cluster.registry.address, "tx-bad", _Committed(), send_timeout_ms=1,
            options=ProducerOptions(),
        )  # fmt: skip
    for n, (options, body, topic) in enumerate(cases):
        tx = TransactionProducer(
            cluster.registry.address, f"tx-zip-{n}", _Committed(), options=options
        ).start()
        try:
            result = tx.send_in_transaction(
                Message(topic=topic, body=body), lambda msg: LocalTransactionState.COMMIT
            )
        finally:
            tx.shutdown()
        assert result.state is LocalTransactionState.COMMIT
        with Producer(cluster.registry.address, f"pg-zip-{n}", options=options) as plain:
            assert plain.send(Message(topic=topic, body=body)).status is SendStatus.SEND_OK
        wait_until(lambda t=topic: len(pull_everything(cluster, t)) == 2, "both messages")
        from_tx, from_producer = sorted(
            pull_everything(cluster, topic), key=lambda m: m.commitlog_offset
        )
        assert bytes(from_tx.body) == bytes(from_producer.body) == body
        zipped = from_tx.sys_flag & ZLIB_SYS_FLAG == ZLIB_SYS_FLAG
        assert zipped == (from_producer.sys_flag & ZLIB_SYS_FLAG == ZLIB_SYS_FLAG), topic
        assert zipped == (topic in ("zipped-tx", "small-zipped-tx")), topic
        assert (from_tx.total_size < len(body) // 2) == zipped


class _Committed:
    def check_local_transaction(self, msg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def _corrupt_record(topic: str) -> bytes:
    """A record whose body says zlib but is not (its CRC is right: the store takes it)."""
    head, body, tail = send_record_parts(topic, b"\x78\x9cnot zlib at all" * 8)
    patched = bytearray(head)
    struct.pack_into(">i", patched, SYS_FLAG_OFFSET, ZLIB_SYS_FLAG)
    return bytes(patched) + body + tail


def test_a_corrupt_compressed_body_is_a_per_message_error(
    cluster: Cluster, producer: Producer, consumers: Callable[..., PushConsumer]
) -> None:
    results = producer.send_records("zipbad", _corrupt_record("zipbad"), 1)
    assert results[0].status is SendStatus.SEND_OK
    good = compressible(6)
    producer.send(Message(topic="zipbad", body=good))

    with PullConsumer(cluster.registry.address, "cg-zipbad-pull") as puller:
        messages = puller.pull(results[0].queue, 0).messages
    assert len(messages) >= 1
    with pytest.raises(CorruptBody, match="does not inflate"):
        _ = messages[0].body

    errors: list[str] = []
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(batch: list[ReceivedMessage]) -> ConsumeResult:
        for message in batch:
            try:
                body = bytes(message.body)
            except CorruptBody as exc:
                with lock:
                    errors.append(str(exc))
                raise  # the failure policy: sent back, offered again later
            with lock:
                got.append(body)
        return ConsumeResult.SUCCESS

    consumers(
        "cg-zipbad", {"zipbad": "*"}, listener, consume_batch_max_size=1, max_reconsume_times=2
    )
    wait_until(lambda: good in got and len(errors) >= 2, "the good body and a retried bad one")
    assert got == [good]  # the bad body never passed for a good one, retried or not
    assert all("does not inflate" in e for e in errors)

    # after its retries the bad message is in the group's DLQ, its bytes as they were stored
    def listed() -> str:
        out = _cli("admin", "group", "dlq", "cg-zipbad", "--registry", cluster.registry.address)
        return out.stdout if out.returncode == 0 and "1 dead letter" in out.stdout else ""

    wait_until(listed, "the bad message in the DLQ")
    assert "reconsumed 2" in listed() and "body unreadable: compressed body" in listed()

    out = _inspect(cluster, 2)
    assert "stored compressed: topic zipbad queue" in out and "does not inflate" in out
