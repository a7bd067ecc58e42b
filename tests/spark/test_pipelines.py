"""The example jobs of pipelines/ against a real cluster and real store directories.

Expected results are computed here, in plain Python, from what was sent or
from what the store API returns; never with the jobs' own code.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from boltmq.message import Message
from boltmq.producer import Producer
from pipelines import events as events_cli
from pipelines import store_export, window_aggregates
from pipelines.events import Event, send_events
from services.store import MessageStore, PutStatus, StoreMessage
from tests.integration.conftest import Cluster

MINUTE_MS = 60_000
T0 = 1_700_000_040_000
"""A whole minute (ms since the epoch): the first event window starts here."""
WATERMARK_MS = 10_000


# ------------------------------------------------------------------ streaming job
def window_job(cluster: Cluster, checkpoint: Path, output: str) -> window_aggregates.WindowJob:
    job, _master = window_aggregates.parse_args(
        [
            "--registry",
            cluster.registry.address,
            "--input",
            f"{output}In",
            "--output",
            output,
            "--checkpoint",
            str(checkpoint),
            "--window",
            "1m",
            "--watermark",
            "10s",
            "--available-now",
        ]
    )
    return job


def spread_events(rng: random.Random, count: int, low_ms: int, high_ms: int) -> list[Event]:
    """Events over [low, high): three keys, two tags and no tag, a few without a value."""
    return [
        Event(
            key=f"k{rng.randrange(3)}",
            tag=rng.choice(["a", "b", None]),
            event_time_ms=rng.randrange(low_ms, high_ms),
            value=None if i % 17 == 0 else rng.randint(-50, 50),
        )
        for i in range(count)
    ]


def expected_windows(events: Iterable[Event], watermark_ms: int) -> dict[tuple, dict]:
    """Tumbling 1-minute windows per key and tag whose end the watermark has passed."""
    windows: dict[tuple, list[Event]] = {}
    for e in events:
        start = e.event_time_ms - e.event_time_ms % MINUTE_MS
        windows.setdefault((e.key, e.tag, start, start + MINUTE_MS), []).append(e)
    expected = {}
    for (key, tag, start, end), members in windows.items():
        if end > watermark_ms:
            continue  # still open: append mode has not written it
        values = [e.value for e in members if e.value is not None]
        expected[(key, tag, start, end)] = {
            "key": key,
            "tag": tag,
            "window_start_ms": start,
            "window_end_ms": end,
            "count": len(members),
            "sum": float(sum(values)) if values else None,
            "min": float(min(values)) if values else None,
            "max": float(max(values)) if values else None,
        }
    return expected


def written_windows(spark, cluster: Cluster, topic: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """Every message of the output topic, its body decoded; tags and keys checked."""
    rows = (
        spark.read.format("boltmq")
        .option("registry", cluster.registry.address)
        .option("topics", topic)
        .load()
        .collect()
    )
    bodies = []
    for row in rows:
        body = json.loads(bytes(row.body))
        assert row.tags == body["tag"] and list(row.keys) == [body["key"]]
        bodies.append(body)
    return bodies


def by_window(bodies: list[dict]) -> dict[tuple, dict]:
    counts = Counter((b["key"], b["tag"], b["window_start_ms"], b["window_end_ms"]) for b in bodies)
    assert max(counts.values()) == 1, "a window was written more than once"
    return {(b["key"], b["tag"], b["window_start_ms"], b["window_end_ms"]): b for b in bodies}


def send_non_events(producer: Producer, topic: str) -> int:
    """Messages the job must drop: no key, a body that is not JSON, no event time."""
    junk = [
        Message(topic=topic, body=json.dumps({"event_time_ms": T0, "value": 1}).encode()),
        Message(topic=topic, body=b"not json", keys=["k0"], tags="a"),
        Message(topic=topic, body=json.dumps({"value": 5}).encode(), keys=["k1"]),
    ]
    producer.send_batch(junk)
    return len(junk)


def test_window_aggregates_equal_the_windows_of_the_events(
    spark, cluster, producer, tmp_path
) -> None:
    rng = random.Random(7)
    job = window_job(cluster, tmp_path / "checkpoint", "PipeWindows")
    first = spread_events(rng, 150, T0, T0 + 4 * MINUTE_MS + 50_000)
    first.append(Event("k0", "a", T0 + 4 * MINUTE_MS + 50_123, 3))  # the newest event
    send_events(cluster.registry.address, job.input_topic, first)
    junk = send_non_events(producer, job.input_topic)

    summary = window_aggregates.run(spark, job)
    assert summary.input_rows == len(first) + junk
    watermark = max(e.event_time_ms for e in first) - WATERMARK_MS
    expected = expected_windows(first, watermark)
    assert {w[2] for w in expected} == {T0 + m * MINUTE_MS for m in range(4)}
    assert by_window(written_windows(spark, cluster, job.output_topic)) == expected

    # A restart from the checkpoint: the open window [4m, 5m) keeps its state, a late
    # event for a window already written is dropped, three more windows close.
    late = Event("k1", "b", T0 + MINUTE_MS + 5_000, 1_000)
    second = spread_events(rng, 100, watermark + 1, T0 + 7 * MINUTE_MS + 30_000)
    send_events(cluster.registry.address, job.input_topic, [late, *second])
    summary = window_aggregates.run(spark, job)
    assert summary.input_rows == len(second) + 1
    watermark = max(e.event_time_ms for e in second) - WATERMARK_MS
    expected = expected_windows(first + second, watermark)
    assert {w[2] for w in expected} == {T0 + m * MINUTE_MS for m in range(7)}
    assert by_window(written_windows(spark, cluster, job.output_topic)) == expected


def test_window_job_bad_arguments_fail_clearly(spark, cluster, capsys, tmp_path) -> None:
    base = [
        "--registry",
        cluster.registry.address,
        "--input",
        "In",
        "--output",
        "Out",
        "--checkpoint",
        str(tmp_path / "chk"),
    ]
    cases = [
        (["--window", "5 minutes"], "'5 minutes' is not a duration: expected a whole number"),
        (["--watermark", "0s"], "a duration must be longer than zero"),
        (["--window", "1m", "--slide", "2m"], "slide 2m is longer than window 1m"),
        (["--output", "In"], "input and output are both 'In'"),
        (["--max-offsets-per-trigger", "0"], "expected a whole number of at least 1"),
        (["--available-now", "--processing-time", "5s"], "not allowed with argument"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as exited:
            window_aggregates.parse_args(base + extra)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        window_aggregates.parse_args(base[:-2])  # no checkpoint
    assert "the following arguments are required: --checkpoint" in capsys.readouterr().err

    # Valid arguments, a topic that does not exist: one line from the connector, exit 1.
    code = window_aggregates.main(base + ["--input", "PipeNoSuchTopic", "--available-now"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert err.startswith(
        "window_aggregates: error: OptionError: topic 'PipeNoSuchTopic' does not exist"
    )


def test_event_producer_bad_arguments(capsys) -> None:
    for argv, message in (
        (["--count", "-3"], "expected a whole number of at least 1"),
        (["--tags", " , "], "--tags: expected a comma list"),
        (["--span", "1w"], "'1w' is not a duration"),
    ):
        with pytest.raises(SystemExit):
            events_cli.parse_args(["--registry", "127.0.0.1:1", "--topic", "T", *argv])
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------ batch job
STORE_TOPICS = {"Orders": 3, "Payments": 2, "Audit": 1, "Burst": 1}
"""Topic -> queues of the exported store. Burst's messages are stored within one
second: its rate counts the span as one minute."""


def fill_store(store: MessageStore, clock_ms: list[int]) -> None:
    """Messages over several minutes of store time, varied sizes, a tie among the largest."""
    rng = random.Random(11)
    for index in range(250):
        topic = ("Orders", "Payments", "Audit")[index % 3] if index % 5 else "Orders"
        if index >= 240:
            topic = "Burst"
        size = 2_000 if index in (40, 80) else rng.randrange(10, 1_500)
        clock_ms[0] += 50 if topic == "Burst" else rng.choice([500, 2_000, 9_000])
        result = store.put_message(
            StoreMessage(
                topic=topic,
                queue_id=index % STORE_TOPICS[topic],
                body=bytes(size),
                tags=f"t{index % 2}",
                keys=[f"k{index}"],
            )
        )
        assert result.status is PutStatus.PUT_OK


def expected_stats(store: MessageStore, largest: int) -> dict[str, dict]:
    """Per-topic statistics from the store API: what stats.json must hold."""
    stats = {}
    for topic, queues in STORE_TOPICS.items():
        got = [m for q in range(queues) for m in store.get_messages(topic, q, 0, 10_000).messages]
        times = [m.store_timestamp for m in got]
        span = max(max(times) - min(times), MINUTE_MS)
        ranked = sorted(got, key=lambda m: (-len(m.body), m.commitlog_offset))[:largest]
        stats[topic] = {
            "topic": topic,
            "messages": len(got),
            "body_bytes": sum(len(m.body) for m in got),
            "first_store_time_ms": min(times),
            "last_store_time_ms": max(times),
            "rate_per_minute": len(got) * MINUTE_MS / span,
            "peak_per_minute": max(Counter(t // MINUTE_MS for t in times).values()),
            "largest": [
                {
                    "rank": rank,
                    "msg_id": m.msg_id,
                    "queue_id": m.queue_id,
                    "queue_offset": m.queue_offset,
                    "commitlog_offset": m.commitlog_offset,
                    "body_bytes": len(m.body),
                }
                for rank, m in enumerate(ranked, 1)
            ],
        }
    return stats


@pytest.fixture
def exported_store(
    make_store: Callable[..., MessageStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, dict[str, dict]]:
    """A stopped store whose messages span ~14 minutes of store time; its statistics."""
    clock_ms = [T0]
    store = make_store()
    with monkeypatch.context() as patch:  # store times minutes apart without waiting
        patch.setattr(time, "time_ns", lambda: clock_ms[0] * 1_000_000)
        fill_store(store, clock_ms)
    expected = expected_stats(store, largest=2)
    store.shutdown()
    return tmp_path / "store", expected


def test_store_export_dataset_and_statistics_equal_the_store(
    spark, exported_store, tmp_path, capsys
) -> None:
    from pyspark.sql import functions as F

    root, expected = exported_store
    output = tmp_path / "export"
    assert len(list((root / "commitlog").iterdir())) >= 4  # several 64 KiB segments
    assert (
        store_export.main([str(root), "--output", str(output), "--largest", "2", "--no-progress"])
        == 0
    )
    printed = capsys.readouterr().out
    total = sum(s["messages"] for s in expected.values())
    assert f"{total:,} messages in 4 topics" in printed
    assert all(topic in printed for topic in STORE_TOPICS)

    stats = json.loads((output / "stats.json").read_text())
    assert {s["topic"]: s for s in stats} == expected
    assert expected["Orders"]["largest"][0]["body_bytes"] == 2_000  # the tie, older first
    assert expected["Burst"]["rate_per_minute"] == 10.0  # 10 messages within a second
    assert spark.read.parquet(str(output / "stats")).count() == len(STORE_TOPICS)

    dataset = spark.read.parquet(str(output / "messages"))
    assert dataset.count() == total
    assert sorted(p.name for p in (output / "messages").glob("topic=*")) == sorted(
        f"topic={t}" for t in STORE_TOPICS
    )
    per_topic = {
        r.topic: (r.n, r.bytes)
        for r in dataset.groupBy("topic")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("body_bytes").alias("bytes"))
        .collect()
    }
    assert per_topic == {t: (s["messages"], s["body_bytes"]) for t, s in expected.items()}

    # A second run into the same directory: refused, then replaced with --overwrite.
    with pytest.raises(SystemExit) as exited:
        store_export.parse_args([str(root), "--output", str(output)])
    assert exited.value.code == 2 and "is not empty: pass --overwrite" in capsys.readouterr().err
    job, _ = store_export.parse_args(
        [
            str(root),
            "--output",
            str(output),
            "--overwrite",
            "--topics",
            "Audit, Payments",
            "--no-progress",
        ]
    )
    result = store_export.export(spark, job)
    assert [s["topic"] for s in result.stats] == ["Audit", "Payments"]
    assert result.messages == expected["Audit"]["messages"] + expected["Payments"]["messages"]
    assert spark.read.parquet(str(output / "messages")).count() == result.messages


def test_store_export_bad_arguments_fail_clearly(exported_store, tmp_path, capsys) -> None:
    root, _ = exported_store
    (tmp_path / "a-file").write_text("x")
    cases = [
        ([str(tmp_path / "missing"), "--output", str(tmp_path / "o")], "is not a store directory"),
        ([str(root), "--output", str(root / "export")], "must not be inside the store"),
        ([str(root), "--output", str(tmp_path / "a-file")], "exists and is not a directory"),
        (
            [str(root), "--output", str(tmp_path / "o"), "--largest", "0"],
            "expected a whole number of at least 1",
        ),
        (
            [str(root), "--output", str(tmp_path / "o"), "--corrupt-records", "skip"],
            "invalid choice: 'skip'",
        ),
        ([str(root)], "the following arguments are required: --output"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:
            store_export.parse_args(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
