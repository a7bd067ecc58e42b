"""Unique message ids (UNIQ_KEY) end to end against a real registry, store and broker.

Every send path gives each message an id before its first attempt (send,
send_batch, send_async, natural batches of concurrent sends, pre-encoded
records): the SendResult shows it, consumers see it, the store indexes it, and
the SDK (Producer.find_message) and ``boltmq admin message id`` find the
message by it as by its offset id.
"""

from __future__ import annotations

import re
import threading

from boltmq import Message, Producer, ProducerOptions, SendStatus
from boltmq.wire.record_batch import send_record_parts
from tests.integration.conftest import Cluster
from tests.integration.sdk_fixtures import producer as producer
from tests.integration.sdk_fixtures import pull_everything
from tests.integration.test_cli import run_cli

UNIQUE_ID = re.compile(r"[0-9A-F]{32}")
THREADS = 8
PER_THREAD = 1250  # 10,000 messages


def test_ids_are_unique_across_threads_and_match_what_consumers_see(cluster: Cluster) -> None:
    results: list[list[object]] = [[] for _ in range(THREADS)]
    failures: list[BaseException] = []
    with Producer(cluster.registry.address, "uniq-pg") as p:  # natural batching on

        def sender(n: int) -> None:
            try:
                for i in range(PER_THREAD):
                    body = f"t{n}-{i}".encode()
                    results[n].append((body, p.send(Message(topic="uniq", body=body))))
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=sender, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:1]
    sent = dict(pair for per_thread in results for pair in per_thread)  # type: ignore[misc]
    assert len(sent) == THREADS * PER_THREAD
    ids = [r.unique_id for r in sent.values()]
    assert all(UNIQUE_ID.fullmatch(i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
    assert {r.status for r in sent.values()} == {SendStatus.SEND_OK}
    seen = {m.body_bytes(): m for m in pull_everything(cluster, "uniq")}
    assert set(seen) == set(sent)
    for body, result in sent.items():
        assert seen[body].unique_id == result.unique_id, body
        assert seen[body].msg_id == result.msg_id  # the offset id is still there


def test_every_send_path_carries_an_id(cluster: Cluster, producer: Producer) -> None:
    one = producer.send(Message(topic="uniq-paths", body=b"one", keys=["k1"]))
    batch = producer.send_batch([Message(topic="uniq-paths", body=b"b%d" % i) for i in range(3)])
    later = producer.send_async(Message(topic="uniq-paths", body=b"async")).result(10)
    own = producer.send(
        Message(topic="uniq-paths", body=b"own", properties={"UNIQ_KEY": "my-own-id"})
    )
    parts = [
        part
        for i in range(2)
        for part in send_record_parts("uniq-paths", b"rec%d" % i, unique_id=f"REC-{i}")
    ]
    records = producer.send_records("uniq-paths", b"".join(parts), 2)
    assert own.unique_id == "my-own-id"  # a UNIQ_KEY the message has is kept
    assert [r.unique_id for r in records] == ["REC-0", "REC-1"]
    generated = [one, *batch, later]
    assert all(UNIQUE_ID.fullmatch(r.unique_id) for r in generated)
    assert len({r.unique_id for r in generated}) == len(generated)
    seen = {m.body_bytes(): m.unique_id for m in pull_everything(cluster, "uniq-paths")}
    assert seen == {
        b"one": one.unique_id,
        **{b"b%d" % i: r.unique_id for i, r in enumerate(batch)},
        b"async": later.unique_id,
        b"own": "my-own-id",
        b"rec0": "REC-0",
        b"rec1": "REC-1",
    }
    assert seen and producer.send(Message(topic="uniq-paths", body=b"x")).unique_id not in seen


def test_find_by_unique_id_through_the_sdk_and_the_cli(cluster: Cluster) -> None:
    registry = cluster.registry.address
    options = ProducerOptions(natural_batching=False)
    with Producer(registry, "uniq-find-pg", options=options) as p:
        results = [
            p.send(Message(topic="uniq-find", body=b"find-%d" % i, keys=["shared"]))
            for i in range(5)
        ]
        target = results[2]
        copies = p.find_message("uniq-find", target.unique_id)
        assert [(c.body, c.msg_id) for c in copies] == [(b"find-2", target.msg_id)]
        assert p.find_message("uniq-find", "0" * 32) == []
        for bad in ("", "has space"):
            try:
                p.find_message("uniq-find", bad)
            except ValueError as exc:
                assert "unique id" in str(exc)
            else:
                raise AssertionError(f"{bad!r} accepted")

    for args in ((), ("--topic", "uniq-find")):
        by_unique = run_cli(
            "admin", "message", "id", target.unique_id, *args, "--registry", registry
        )
        assert by_unique.returncode == 0, by_unique.stderr
        (line,) = by_unique.stdout.splitlines()
        assert f"unique_id={target.unique_id}" in line and "b'find-2'" in line
        assert target.msg_id in line

    for offset_id in (target.msg_id, target.msg_id.lower()):
        by_offset = run_cli("admin", "message", "id", offset_id, "--registry", registry)
        assert by_offset.returncode == 0, by_offset.stderr
        assert f"unique_id={target.unique_id}" in by_offset.stdout

    missing = run_cli("admin", "message", "id", "F" * 32, "--registry", registry)
    assert missing.returncode != 0
    assert "no message with offset id or unique id " + "F" * 32 in missing.stderr
    wrong_topic = run_cli(
        "admin", "message", "id", target.unique_id, "--topic", "nope", "--registry", registry
    )
    assert wrong_topic.returncode != 0 and "topic 'nope'" in wrong_topic.stderr
    spaced = run_cli("admin", "message", "id", "a b", "--registry", registry)
    assert spaced.returncode != 0 and "without spaces" in spaced.stderr
