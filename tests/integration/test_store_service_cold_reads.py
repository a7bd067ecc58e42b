"""Cold reads through a store process: Pull and PullQueues behind the page-cache window.

A ``boltmq serve store`` process with 64 KiB segments and a one-segment window
(``commitlog_page_cache_window_bytes``), and its own cold limits; about five
segments of messages over two queues. A pull that starts behind the window
answers at most the cold count, one inside it what it asked, and only the calls
with a cold pull count in ``boltmq_store_pull_cold_total`` (scraped). A reader
walking both queues with PullQueues gets every message exactly once, also while
other threads append to another topic and follow its head. A cold limit below
one stops the service at start with the setting's name.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from boltmq.v1 import store_pb2, store_pb2_grpc
from boltmq.wire.record import decode_records
from tests.integration.procs import LaunchError, ServiceProcess
from tests.integration.store_service_helpers import (
    OK,
    SEGMENT_BYTES,
    Spawn,
    append,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    msg,
    start_store,
)
from tests.integration.test_metrics import free_port, scrape, value

TOPIC = "ColdTopic"
PER_QUEUE = 300
COLD_COUNT = 5
HEAD_TOPIC = "HeadTopic"
HEAD_MESSAGES = 500


def body(queue_id: int, n: int) -> bytes:
    return f"{queue_id}:{n:05d}|".encode() * 60  # 480 B


def pull(queue_id: int, offset: int, **fields: object) -> store_pb2.PullRequest:
    return store_pb2.PullRequest(topic=TOPIC, queue_id=queue_id, queue_offset=offset, **fields)  # type: ignore[arg-type]


def test_cold_pulls_are_limited_and_a_walking_reader_gets_everything_once(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    metrics_port = free_port()
    stub = connect(
        start_store(
            spawn,
            tmp_path / "s",
            f"commitlog_page_cache_window_bytes={SEGMENT_BYTES}",
            f"max_transfer_count_on_message_in_disk={COLD_COUNT}",
            f"metrics_port={metrics_port}",
        )
    )
    for n in range(0, PER_QUEUE, 10):
        batch = [msg(TOPIC, q, body(q, i)) for i in range(n, n + 10) for q in (0, 1)]
        assert all(r.status == OK for r in append(stub, *batch))

    # Pull from the start: behind the window, raw or decoded.
    raw = stub.Pull(pull(0, 0, max_messages=100, raw_records=True))
    assert raw.record_count == COLD_COUNT and raw.next_begin_offset == COLD_COUNT
    decoded = stub.Pull(pull(1, 0, max_messages=100))
    assert [m.body for m in decoded.messages] == [body(1, i) for i in range(COLD_COUNT)]
    # Inside the window (the last 40 of each queue: about 40 KiB of the 64 KiB): as asked.
    hot = stub.Pull(pull(0, PER_QUEUE - 40, max_messages=100, raw_records=True))
    assert hot.record_count == 40 and hot.next_begin_offset == PER_QUEUE
    both = stub.PullQueues(
        store_pb2.PullQueuesRequest(
            pulls=[pull(0, 0, max_messages=100), pull(1, 255, max_messages=100)]
        )
    )
    assert [a.record_count for a in both.answers] == [COLD_COUNT, 45]
    hot_only = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=[pull(1, 255)]))
    assert hot_only.answers[0].record_count == 32
    # Three calls had a cold pull (two Pulls, one PullQueues); the two hot ones did not count.
    assert value(scrape(metrics_port), "boltmq_store_pull_cold_total") == 3

    # A reader walking both queues with PullQueues: every message once, in order.
    seen, largest_cold, calls = walk(stub)
    assert seen == {q: [body(q, i) for i in range(PER_QUEUE)] for q in (0, 1)}
    assert largest_cold == COLD_COUNT
    assert calls < PER_QUEUE // COLD_COUNT  # the pulls inside the window took more at once


def walk(stub: store_pb2_grpc.StoreServiceStub) -> tuple[dict[int, list[bytes]], int, int]:
    """Both queues from offset 0 to PER_QUEUE with PullQueues: the bodies read per queue,
    the most records a pull far behind the window returned, and the calls made."""
    offsets = {0: 0, 1: 0}
    seen: dict[int, list[bytes]] = {0: [], 1: []}
    largest_cold = calls = 0
    while any(o < PER_QUEUE for o in offsets.values()):
        queues = [q for q, o in offsets.items() if o < PER_QUEUE]
        answer = stub.PullQueues(
            store_pb2.PullQueuesRequest(
                pulls=[pull(q, offsets[q], max_messages=1000) for q in queues]
            )
        )
        calls += 1
        for q, one in zip(queues, answer.answers, strict=True):
            assert one.next_begin_offset > offsets[q]  # every pull moves on
            records = decode_records(one.records, check_crc=True)
            seen[q] += [r.body for r in records]
            if offsets[q] < PER_QUEUE - 100:  # far behind the window: cold
                largest_cold = max(largest_cold, one.record_count)
            offsets[q] = one.next_begin_offset
    return seen, largest_cold, calls


def test_cold_reads_on_their_thread_beside_appends_and_a_head_consumer(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    """The walker reads cold on the cold-read thread while another thread appends to a
    second topic and a third follows that topic's head: each gets every message once."""
    stub = connect(
        start_store(
            spawn,
            tmp_path / "s",
            f"commitlog_page_cache_window_bytes={SEGMENT_BYTES}",
            f"max_transfer_count_on_message_in_disk={COLD_COUNT}",
        )
    )
    for n in range(0, PER_QUEUE, 10):
        batch = [msg(TOPIC, q, body(q, i)) for i in range(n, n + 10) for q in (0, 1)]
        assert all(r.status == OK for r in append(stub, *batch))
    head = [f"head-{i}".encode() for i in range(HEAD_MESSAGES)]

    def produce() -> None:
        for n in range(0, HEAD_MESSAGES, 5):
            sent = append(stub, *(msg(HEAD_TOPIC, 0, b) for b in head[n : n + 5]))
            assert all(r.status == OK for r in sent)

    def consume() -> list[bytes]:
        got: list[bytes] = []
        while len(got) < HEAD_MESSAGES:
            answer = stub.Pull(
                store_pb2.PullRequest(
                    topic=HEAD_TOPIC, queue_id=0, queue_offset=len(got), max_messages=100
                )
            )
            got += [m.body for m in answer.messages]
        return got

    with ThreadPoolExecutor(2) as pool:
        producing, consuming = pool.submit(produce), pool.submit(consume)
        seen, largest_cold, _ = walk(stub)
        producing.result(timeout=120)
        consumed = consuming.result(timeout=120)
    assert seen == {q: [body(q, i) for i in range(PER_QUEUE)] for q in (0, 1)}
    assert largest_cold == COLD_COUNT
    assert consumed == head


@pytest.mark.parametrize(
    "setting",
    ["max_transfer_count_on_message_in_disk=0", "max_transfer_bytes_on_message_in_disk=-1"],
)
def test_a_cold_limit_below_one_stops_the_store_at_start(tmp_path: Path, setting: str) -> None:
    process = ServiceProcess("store", tmp_path / "logs", f"root_dir={tmp_path / 'store'}", setting)
    with pytest.raises(LaunchError, match="did not start"):
        process.start()
    name, value = setting.split("=")
    assert f"{name} must be at least 1, got {value}" in process.last_error()
    assert "Traceback" not in process.log()
