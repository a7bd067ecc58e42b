"""Cold reads: a pull behind the CommitLog's page-cache window is held to the cold limits
and read on the service's cold-read thread.

A real store on real files (64 KiB segments, a one-segment window): the oldest
messages lie behind the window, the newest inside it. A pull that starts behind
it returns at most ``max_transfer_count_on_message_in_disk`` messages (8 here) and
``max_transfer_bytes_on_message_in_disk`` bytes (one message always), a pull
inside it what it asked; a reader that walks the queue still gets every
message exactly once, in order. The service (its servicer, in this process)
reads a cold PullQueues on its cold-read thread and a hot one where it is called,
and gives each cold pull of a PullQueues call its even share of the call's bytes
when that is more than the cold byte limit, up to ``max_cold_share_bytes`` (0: none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from boltmq.kernel.config import ConfigError
from boltmq.v1 import store_pb2
from boltmq.wire.record import decode_records
from services.store import MessageStore, StoreMessage
from services.store.config import COLD_READ_THREADS_MAX
from services.store.servicer import StoreServicer
from services.store.status import GetResult, GetStatus
from tests.conftest import small_config

WINDOW = 64 * 1024
MESSAGES = 600
TOPIC = "Cold"
TAGS = ("tagA", "tagB", "tagC")
COLD_COUNT = 8


def body(n: int) -> bytes:
    return f"{n:06d}|".encode() * 70  # 490 B: 600 messages are about six segments


def numbers(got: GetResult, raw: bool) -> list[int]:
    """The message number of each message a get returned (raw records decoded: one view
    may hold several records back to back)."""
    if raw:
        bodies = [r.body for view in got.raw for r in decode_records(view, check_crc=True)]
    else:
        bodies = [m.body for m in got.messages]
    return [int(bytes(b[:6])) for b in bodies]


def filled(make_store: Callable[..., MessageStore], **overrides: object) -> MessageStore:
    overrides.setdefault("commitlog_page_cache_window_bytes", WINDOW)
    overrides.setdefault("max_transfer_count_on_message_in_disk", COLD_COUNT)
    store = make_store(**overrides)
    for n in range(MESSAGES):
        store.put_message(StoreMessage(topic=TOPIC, queue_id=0, body=body(n), tags=TAGS[n % 3]))
    return store


def taken(result: GetResult, raw: bool) -> int:
    return result.raw_count if raw else len(result.messages)


def first_hot_offset(store: MessageStore) -> int:
    """The queue offset of the first message inside the window (walking cold pulls)."""
    offset = 0
    while True:
        got = store.get_messages(TOPIC, 0, offset, MESSAGES)
        if not got.cold:
            return offset
        offset = got.next_begin_offset


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "decoded"])
def test_a_pull_behind_the_window_returns_the_cold_count_and_one_inside_what_it_asked(
    make_store: Callable[..., MessageStore], raw: bool
) -> None:
    store = filled(make_store)
    cold = store.get_messages(TOPIC, 0, 0, 1024, raw=raw)
    assert cold.status is GetStatus.FOUND and cold.cold
    assert taken(cold, raw) == COLD_COUNT and cold.next_begin_offset == COLD_COUNT
    assert store.reader.is_cold(store.commitlog.min_offset)

    hot_from = first_hot_offset(store)
    assert 0 < hot_from < MESSAGES - 32  # the window holds more than one pull's worth
    hot = store.get_messages(TOPIC, 0, hot_from, 32, raw=raw)
    assert hot.status is GetStatus.FOUND and not hot.cold
    assert taken(hot, raw) == 32 and hot.next_begin_offset == hot_from + 32


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "decoded"])
def test_the_cold_byte_limit_lets_one_message_through_and_no_more_than_the_limit(
    make_store: Callable[..., MessageStore], raw: bool
) -> None:
    store = filled(make_store, max_transfer_bytes_on_message_in_disk=1)
    one = store.get_messages(TOPIC, 0, 0, 1024, raw=raw)
    assert one.cold and taken(one, raw) == 1 and one.next_begin_offset == 1

    store.shutdown()
    bounded = make_store(
        store.config.root_dir,
        commitlog_page_cache_window_bytes=WINDOW,
        max_transfer_count_on_message_in_disk=1000,
        max_transfer_bytes_on_message_in_disk=4096,
    )
    got = bounded.get_messages(TOPIC, 0, 0, 1024, raw=True)
    size = sum(len(view) for view in got.raw)
    record = size // got.raw_count  # every record here has the same size
    assert got.cold and got.raw_count == 4096 // record and size <= 4096
    hot = bounded.get_messages(TOPIC, 0, MESSAGES - 20, 1024, raw=True)
    assert not hot.cold and hot.raw_count == 20  # the cold byte limit does not apply here


@pytest.mark.parametrize(
    ("raw", "subscription"),
    [(True, None), (False, None), (False, "tagA || tagC")],
    ids=["raw", "decoded", "filtered"],
)
def test_a_reader_walking_the_queue_reads_every_message_exactly_once(
    make_store: Callable[..., MessageStore], raw: bool, subscription: str | None
) -> None:
    store = filled(make_store)
    wanted = [n for n in range(MESSAGES) if subscription is None or TAGS[n % 3] != "tagB"]
    seen: list[int] = []
    cold_sizes, hot_sizes = [], []
    offset = 0
    while offset < MESSAGES:
        got = store.get_messages(TOPIC, 0, offset, 64, subscription, raw=raw)
        assert got.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE)
        assert got.next_begin_offset > offset  # always progress
        seen += numbers(got, raw)
        (cold_sizes if got.cold else hot_sizes).append(taken(got, raw))
        offset = got.next_begin_offset
    assert seen == wanted
    assert cold_sizes and max(cold_sizes) <= COLD_COUNT
    assert hot_sizes and max(hot_sizes) > COLD_COUNT


def test_with_the_window_off_no_read_is_cold(make_store: Callable[..., MessageStore]) -> None:
    store = filled(make_store, commitlog_page_cache_window_bytes=0)
    got = store.get_messages(TOPIC, 0, 0, 64, raw=True)
    assert not got.cold and got.raw_count == 64
    assert not store.reader.is_cold(store.commitlog.min_offset)


@pytest.mark.parametrize(
    "name",
    [
        "max_transfer_count_on_message_in_disk",
        "max_transfer_bytes_on_message_in_disk",
        "max_transfer_count_on_message_in_memory",
        "max_transfer_bytes_on_message_in_memory",
    ],
)
@pytest.mark.parametrize("value", [0, -8])
def test_transfer_limits_below_one_are_refused(tmp_path: Path, name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"{name} must be at least 1, got {value}"):
        small_config(tmp_path, **{name: value})


@pytest.mark.parametrize("threads", [1, 0])
def test_the_service_reads_cold_pulls_on_its_cold_read_thread(
    make_store: Callable[..., MessageStore], threads: int
) -> None:
    store = filled(make_store, cold_read_threads=threads)
    servicer = StoreServicer(store, store.config)
    executor = servicer._cold_reads
    assert (executor is None) == (threads == 0)

    def pull_queues(offset: int) -> store_pb2.PullQueuesResponse:
        request = store_pb2.PullQueuesRequest(
            pulls=[store_pb2.PullRequest(topic=TOPIC, queue_id=0, queue_offset=offset)]
        )
        encoded = asyncio.run(servicer.PullQueues(request, None))  # type: ignore[arg-type]
        return store_pb2.PullQueuesResponse.FromString(encoded)

    try:
        hot = pull_queues(MESSAGES - 10)
        assert hot.answers[0].record_count == 10
        assert executor is None or not executor._threads  # hot: read on the caller's thread
        cold = pull_queues(0)
        assert cold.answers[0].record_count == COLD_COUNT == cold.answers[0].next_begin_offset
        assert executor is None or len(executor._threads) == 1
    finally:
        servicer.close()
    if executor is not None:
        with pytest.raises(RuntimeError, match="after shutdown"):  # closed: its thread ended
            executor.submit(print)


@pytest.mark.parametrize("threads", [-1, COLD_READ_THREADS_MAX + 1])
def test_cold_read_threads_out_of_range_are_refused(tmp_path: Path, threads: int) -> None:
    with pytest.raises(
        ConfigError, match=f"cold_read_threads must be between 0 and 64, got {threads}"
    ):
        small_config(tmp_path, cold_read_threads=threads)


def shared_store(make_store: Callable[..., MessageStore], **settings: int) -> MessageStore:
    """Four queues whose oldest messages lie behind the window; cold pulls held to 4,096
    bytes and 1,000 messages."""
    store = make_store(
        commitlog_page_cache_window_bytes=WINDOW,
        max_transfer_count_on_message_in_disk=1000,
        max_transfer_bytes_on_message_in_disk=4096,
        **settings,
    )
    for n in range(MESSAGES):  # 150 a queue, the oldest of each behind the window
        store.put_message(StoreMessage(topic=TOPIC, queue_id=n % 4, body=body(n)))
    return store


def pull_queues(servicer: StoreServicer, queues: int, max_bytes: int) -> list[int]:
    """The record count of each answer of a PullQueues of the first ``queues`` queues from
    offset 0, the call asking ``max_bytes``."""
    request = store_pb2.PullQueuesRequest(
        pulls=[
            store_pb2.PullRequest(topic=TOPIC, queue_id=q, queue_offset=0, max_messages=1000)
            for q in range(queues)
        ],
        max_bytes=max_bytes,
    )
    encoded = asyncio.run(servicer.PullQueues(request, None))  # type: ignore[arg-type]
    return [a.record_count for a in store_pb2.PullQueuesResponse.FromString(encoded).answers]


def test_a_cold_pull_of_a_pull_queues_call_takes_its_share_of_the_call(
    make_store: Callable[..., MessageStore],
) -> None:
    store = shared_store(make_store)
    record = len(store.get_messages(TOPIC, 0, 0, 1, raw=True).raw[0])
    servicer = StoreServicer(store, store.config)
    try:
        assert pull_queues(servicer, 2, 40_000) == [20_000 // record] * 2  # above the limit
        assert pull_queues(servicer, 4, 8_000)[0] == 4096 // record  # below it (2,000): the limit
        direct = store.get_messages(TOPIC, 1, 0, 1000, raw=True, cold_bytes=30_000)
        assert direct.cold and direct.raw_count == 30_000 // record
        hot = store.get_messages(TOPIC, 1, 140, 1000, raw=True, cold_bytes=1)
        assert not hot.cold and hot.raw_count == 10  # a hot read takes what it asked
    finally:
        servicer.close()


@pytest.mark.parametrize(("cap", "allowed"), [(10_000, 10_000), (0, 4096)])
def test_max_cold_share_bytes_caps_the_share_and_zero_turns_it_off(
    make_store: Callable[..., MessageStore], cap: int, allowed: int
) -> None:
    """A share of 20,000 bytes a queue: capped at the setting, or the cold limit at 0."""
    store = shared_store(make_store, max_cold_share_bytes=cap)
    record = len(store.get_messages(TOPIC, 0, 0, 1, raw=True).raw[0])
    servicer = StoreServicer(store, store.config)
    try:
        assert pull_queues(servicer, 2, 40_000) == [allowed // record] * 2
    finally:
        servicer.close()


def test_a_negative_max_cold_share_bytes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_cold_share_bytes must be at least 0, got -1"):
        small_config(tmp_path, max_cold_share_bytes=-1)
