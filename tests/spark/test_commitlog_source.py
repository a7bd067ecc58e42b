"""boltmq-commitlog against real store directories: equal to what the store API returns."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.spark.commitlog import (
    CommitLogPartition,
    SegmentRange,
    data_bytes,
    plan_partitions,
)
from boltmq.spark.schema import COMMITLOG_COLUMNS
from boltmq.wire.record import BODY_CRC_OFFSET, MAGIC_BLANK, MAGIC_MESSAGE, read_total_and_magic
from services.store import MessageStore, PutStatus, StoreMessage

SEGMENT_BYTES = 64 * 1024
TOPICS = ("Orders", "Payments")


def fill(store: MessageStore, count: int) -> None:
    """Messages of varied sizes over two topics and three queues: several segments."""
    for index in range(count):
        topic = TOPICS[index % 2]
        body = f"m{index}:".encode() + bytes([index % 251]) * (200 + (index * 37) % 1500)
        result = store.put_message(
            StoreMessage(
                topic=topic,
                queue_id=index % 3,
                body=body,
                tags=f"t{index % 4}",
                keys=[f"k{index}"],
                properties={"seq": str(index)},
            )
        )
        assert result.status is PutStatus.PUT_OK


def store_rows(store: MessageStore) -> list[tuple]:
    """Every message as the store API returns it, in the reader's column terms."""
    rows = []
    for topic in TOPICS:
        for queue_id in range(3):
            got = store.get_messages(topic, queue_id, 0, 10_000)
            for m in got.messages:
                props = {k: v for k, v in m.properties.items() if k not in ("TAGS", "KEYS")}
                rows.append(
                    (
                        m.topic,
                        m.queue_id,
                        m.queue_offset,
                        m.commitlog_offset,
                        m.msg_id,
                        m.store_timestamp,
                        m.tags,
                        m.keys,
                        props,
                        bytes(m.body),
                        m.sys_flag,
                        m.reconsume_times,
                    )
                )
    return sorted(rows, key=lambda r: r[3])


def spark_rows(frame) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted(
        (
            (
                r.topic,
                r.queue_id,
                r.queue_offset,
                r.commitlog_offset,
                r.msg_id,
                int(r.store_timestamp.replace(tzinfo=UTC).timestamp() * 1000),
                r.tags,
                list(r.keys),
                dict(r.properties),
                bytes(r.body),
                r.sys_flag,
                r.reconsume_times,
            )
            for r in frame.collect()
        ),
        key=lambda r: r[3],
    )


@pytest.fixture
def filled(make_store: Callable[..., MessageStore], tmp_path: Path) -> tuple[Path, list[tuple]]:
    """A stopped store of several segments, each ended by a blank marker; its rows."""
    store = make_store()
    fill(store, 300)
    expected = store_rows(store)
    store.shutdown()
    return tmp_path / "store", expected


def ends_with_blank(data: bytes) -> bool:
    """Walk the records of a segment: does a blank marker end it?"""
    position = 0
    while position + 8 <= len(data):
        total, magic = read_total_and_magic(data, position)
        if magic == MAGIC_BLANK:
            return position + total == len(data)
        if total <= 0:
            return False
        position += total
    return False


def segments(root: Path) -> list[Path]:
    """Segment files (not the pre-allocated ``.tmp`` of the next one)."""
    return sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())


def test_reads_every_record_of_several_segments_like_the_store_api(spark, filled) -> None:
    root, expected = filled
    files = segments(root)
    assert len(files) >= 4
    # full segments end with a blank marker; the last (and a pre-allocated one) do not
    assert sum(ends_with_blank(path.read_bytes()) for path in files) >= 3
    frame = spark.read.format("boltmq-commitlog").load(str(root))
    assert frame.rdd.getNumPartitions() == 2  # every task reads several segments
    assert spark_rows(frame) == expected
    assert (
        frame.schema.simpleString()
        == spark.createDataFrame([], COMMITLOG_COLUMNS).schema.simpleString()
    )


def test_filters_on_topic_queue_and_store_time(spark, filled) -> None:
    root, expected = filled
    middle = expected[len(expected) // 2][5]
    frame = (
        spark.read.format("boltmq-commitlog")
        .load(str(root))
        .where("topic = 'Orders' and queue_id in (0, 1)")
        .where(f"store_timestamp >= timestamp_millis({middle})")
    )
    wanted = [r for r in expected if r[0] == "Orders" and r[1] in (0, 1) and r[5] >= middle]
    assert wanted
    assert spark_rows(frame) == wanted


def test_time_filter_prunes_segments(spark, filled) -> None:
    root, expected = filled
    last = max(r[5] for r in expected)
    frame = (
        spark.read.format("boltmq-commitlog")
        .load(str(root))
        .where(f"store_timestamp > timestamp_millis({last})")
    )
    assert frame.count() == 0


def test_without_bodies(spark, filled) -> None:
    root, expected = filled
    rows = (
        spark.read.format("boltmq-commitlog")
        .option("includeBody", "false")
        .load(str(root))
        .select("body", "queue_offset")
        .collect()
    )
    assert len(rows) == len(expected)
    assert all(r.body is None for r in rows)


def damage_body_crc(root: Path, commitlog_offset: int) -> Path:
    """Flip the stored body CRC of the record at ``commitlog_offset`` (store stopped)."""
    for path in segments(root):
        start = int(path.name)
        if start <= commitlog_offset < start + SEGMENT_BYTES:
            with open(path, "r+b") as handle:
                handle.seek(commitlog_offset - start + BODY_CRC_OFFSET)
                value = handle.read(4)
                handle.seek(commitlog_offset - start + BODY_CRC_OFFSET)
                handle.write(bytes(b ^ 0x5A for b in value))
            return path
    raise AssertionError("offset not in any segment")


def test_bad_crc_fails_naming_segment_and_offset(spark, filled) -> None:
    root, expected = filled
    victim = expected[100][3]
    path = damage_body_crc(root, victim)
    with pytest.raises(Exception) as failure:
        spark.read.format("boltmq-commitlog").load(str(root)).count()
    assert f"segment {path.name}: body CRC mismatch at commitlog offset {victim}" in str(
        failure.value
    )
    marked = (
        spark.read.format("boltmq-commitlog")
        .option("corruptRecords", "mark")
        .load(str(root))
        .where("corrupt")
        .select("commitlog_offset")
        .collect()
    )
    assert [r.commitlog_offset for r in marked] == [victim]


def test_bad_framing_fails_naming_segment_and_offset(spark, filled) -> None:
    root, expected = filled
    victim = expected[50][3]
    path = next(p for p in segments(root) if int(p.name) <= victim < int(p.name) + SEGMENT_BYTES)
    with open(path, "r+b") as handle:
        handle.seek(victim - int(path.name) + 4)
        handle.write(b"\x00\x00\x00\x01")
    with pytest.raises(Exception) as failure:
        spark.read.format("boltmq-commitlog").load(str(root)).count()
    assert f"segment {path.name}: no valid record at commitlog offset {victim}" in str(
        failure.value
    )


def test_reads_beside_a_running_store(spark, make_store, tmp_path) -> None:
    store = make_store()
    fill(store, 120)
    store.flush() if hasattr(store, "flush") else None
    expected = store_rows(store)
    assert (tmp_path / "store" / "lock").exists()
    assert (
        spark_rows(spark.read.format("boltmq-commitlog").load(str(tmp_path / "store"))) == expected
    )


def test_not_a_store_directory(spark, tmp_path) -> None:
    with pytest.raises(Exception, match="is not a store directory"):
        spark.read.format("boltmq-commitlog").load(str(tmp_path / "nowhere")).count()
    os.makedirs(tmp_path / "empty")
    with pytest.raises(Exception, match="holds no CommitLog segment files"):
        spark.read.format("boltmq-commitlog").load(str(tmp_path / "empty")).count()


def test_timestamps_are_utc_milliseconds(spark, filled) -> None:
    root, expected = filled
    first = (
        spark.read.format("boltmq-commitlog").load(str(root)).orderBy("commitlog_offset").first()
    )
    assert first.store_timestamp.replace(tzinfo=UTC) == datetime.fromtimestamp(
        expected[0][5] / 1000, UTC
    )


def test_segments_split_into_byte_ranges_read_every_record_once(spark, filled) -> None:
    root, expected = filled
    frame = (
        spark.read.format("boltmq-commitlog").option("maxPartitionBytes", "3000").load(str(root))
    )
    assert frame.rdd.getNumPartitions() >= 20 * len(segments(root))
    assert spark_rows(frame) == expected
    for tasks in (3, 7):  # cuts anywhere: inside segments, across their edges
        frame = (
            spark.read.format("boltmq-commitlog")
            .option("minPartitions", str(tasks))
            .load(str(root))
        )
        assert frame.rdd.getNumPartitions() == tasks
        assert spark_rows(frame) == expected


def test_a_single_segment_is_split_for_two_tasks(spark, make_store, tmp_path) -> None:
    store = make_store(mapped_file_size_commitlog=1024 * 1024)
    fill(store, 100)
    expected = store_rows(store)
    store.shutdown()
    assert len(segments(tmp_path / "store")) == 1
    frame = spark.read.format("boltmq-commitlog").load(str(tmp_path / "store"))
    assert frame.rdd.getNumPartitions() == 2
    assert spark_rows(frame) == expected
    one = (
        spark.read.format("boltmq-commitlog")
        .option("minPartitions", "1")
        .load(str(tmp_path / "store"))
    )
    assert one.rdd.getNumPartitions() == 1
    with pytest.raises(Exception, match="minPartitions='x': expected a positive integer"):
        spark.read.format("boltmq-commitlog").option("minPartitions", "x").load(
            str(tmp_path / "store")
        ).count()


def test_a_split_inside_a_body_that_looks_like_a_record_fails(spark, make_store, tmp_path) -> None:
    """A body holding a fake header that names its own offset: the split must not trust it."""
    store = make_store()
    first = store.put_message(StoreMessage(topic="Orders", queue_id=0, body=b"a" * 50))
    second_at = first.commitlog_offset + first.wrote_bytes
    fake_at = second_at + 88 + 100  # IPv4 hosts: the body starts 88 bytes into a record
    fake = struct.pack(">iI", 200, MAGIC_MESSAGE) + bytes(20) + struct.pack(">q", fake_at)
    body = b"p" * 100 + fake + b"q" * 300
    second = store.put_message(StoreMessage(topic="Orders", queue_id=0, body=body))
    assert second.commitlog_offset == second_at
    store.shutdown()
    root = tmp_path / "store"
    assert segments(root)[0].read_bytes()[fake_at : fake_at + len(fake)] == fake
    whole = spark.read.format("boltmq-commitlog").load(str(root))
    assert sorted(r.queue_offset for r in whole.collect()) == [0, 1]
    # The task before the split walks past it; the task after finds no record there:
    # whichever fails first fails the query, naming the split. (The cut must fall
    # after the second record's start, up to the fake header.)
    used = data_bytes(str(segments(root)[0]))
    tasks = next(
        n for n in range(2, used) if any(second_at < used * k // n <= fake_at for k in range(1, n))
    )
    with pytest.raises(Exception, match=f"the split at commitlog offset {fake_at}"):
        spark.read.format("boltmq-commitlog").option("minPartitions", str(tasks)).load(
            str(root)
        ).count()


def task_bytes(partition: CommitLogPartition, used: dict[str, int]) -> int:
    return sum((used[r.path] if r.end is None else r.end) - r.begin for r in partition.ranges)


@settings(max_examples=300, deadline=None)
@given(
    used=st.lists(st.integers(0, 10_000), min_size=1, max_size=12),
    max_bytes=st.integers(1, 30_000),
    min_partitions=st.integers(1, 5),
)
def test_planning_covers_every_segment_once_in_equal_tasks(
    used: list[int], max_bytes: int, min_partitions: int
) -> None:
    whole = [SegmentRange(f"{index:020d}", index * 10_000) for index in range(len(used))]
    sizes = {segment.path: size for segment, size in zip(whole, used, strict=True)}
    tasks = plan_partitions(whole, used, max_bytes, min_partitions)
    ranges = [r for task in tasks for r in task.ranges]
    # In order, no gap, no overlap: each segment from 0 to its end (None), pieces touching.
    for segment in whole:
        mine = [r for r in ranges if r.path == segment.path]
        assert mine[0].begin == 0 and mine[-1].end is None
        assert all(a.end == b.begin for a, b in zip(mine, mine[1:], strict=False))
    assert [r.path for r in ranges] == sorted(r.path for r in ranges)
    total = sum(used)
    count = max(1, -(-total // max_bytes))
    count = -(-count // min_partitions) * min_partitions
    if total >= count:  # every cut falls somewhere: exactly that many tasks, equal bytes
        assert len(tasks) == count
        assert {task_bytes(task, sizes) for task in tasks} <= {total // count, -(-total // count)}
    assert all(task_bytes(task, sizes) <= max(max_bytes, 1) or len(tasks) < count for task in tasks)


def test_planning_spans_segment_edges() -> None:
    whole = [SegmentRange(f"{index:020d}", index * 100) for index in range(3)]
    tasks = plan_partitions(whole, [100, 100, 100], 1000, 2)
    assert [task.ranges for task in tasks] == [
        (whole[0], SegmentRange(whole[1].path, 100, 0, 50)),
        (SegmentRange(whole[1].path, 100, 50, None), whole[2]),
    ]


def test_compressed_bodies_are_inflated(spark, make_store, tmp_path) -> None:
    """Records a producer compressed (sys_flag 0x301), among plain ones: the rows hold
    the original bodies and the stored sys_flag."""
    from boltmq.wire.body_compression import ZLIB_SYS_FLAG
    from boltmq.wire.record_batch import RecordBatch, send_record_parts

    store = make_store()
    bodies = [(b"zipped %d " % i) * 2_000 if i % 3 == 0 else b"plain %d" % i for i in range(40)]
    raw = b"".join(b"".join(send_record_parts("Zipped", b, compress_over=4096)) for b in bodies)
    results = store.put_messages(RecordBatch(raw, len(bodies), "Zipped", 0), ("10.0.0.1", 1))
    assert {r.status for r in results} == {PutStatus.PUT_OK}
    store.shutdown()
    rows = spark.read.format("boltmq-commitlog").load(str(tmp_path / "store")).collect()
    by_offset = sorted(rows, key=lambda r: r.queue_offset)
    assert [bytes(r.body) for r in by_offset] == bodies
    assert [r.sys_flag for r in by_offset] == [
        ZLIB_SYS_FLAG if i % 3 == 0 else 0 for i in range(len(bodies))
    ]
