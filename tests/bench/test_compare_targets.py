"""The side-by-side targets computed from a table's rows and the floor of the same run,
in one pass over the systems or several."""

from __future__ import annotations

import dataclasses

from bench.compare import report
from bench.compare.workload import Row
from bench.relay_floor import Floor

FLOOR = Floor("push", "stream", 1, 1, 1024, 1000, 1.0, 0.5, 0.9, (1.0, 1.0, 1.0))


def row(
    system: str, scenario: str, mode: str, rate: int, p50: float | None = None, at: int = 0
) -> Row:
    producers = 64 if mode == "concurrent-sends" else 1
    return Row(system, scenario, mode, producers, 1, rate, 1.0, 1024, p50, p50, at)


ROWS = [
    row("BoltMQ", "produce", "concurrent-sends", 15_000),
    row("Redis Streams", "produce", "concurrent-sends", 10_000),  # 1.50x: met
    row("NATS JetStream", "produce", "concurrent-sends", 10_001),  # just under 1.5x
    row("BoltMQ", "produce", "batched", 60_000),
    row("Redis Streams", "produce", "batched", 50_000),  # 1.20x: met
    row("NATS JetStream", "produce", "batched", 90_000),  # not a target against NATS
    row("BoltMQ", "consume", "batched", 100_000),
    row("Redis Streams", "consume", "batched", 80_000),  # 1.25x: not met
    row("BoltMQ", "produce", "one-at-a-time", 800, p50=0.61),
]


def test_each_rate_target_is_checked_against_its_own_peers() -> None:
    lines = report.target_lines(ROWS)
    assert lines == [
        "- produce concurrent-sends, BoltMQ >= 1.5x Redis Streams: met in 1 of 1 (64p/1t 1.50)",
        "- produce concurrent-sends, BoltMQ >= 1.5x NATS JetStream: met in 0 of 1 (64p/1t 1.50)",
        "- produce batched, BoltMQ >= 1.2x Redis Streams: met in 1 of 1 (1p/1t 1.20)",
        "- consume batched, BoltMQ >= 1.5x Redis Streams: met in 0 of 1 (1p/1t 1.25)",
    ]


def test_one_sender_is_held_to_the_floor_of_the_same_run() -> None:
    (line,) = report.target_lines(ROWS, [FLOOR])[4:]
    assert line == (
        "- produce one-at-a-time, 1 producer, BoltMQ p50 <= 1.2x the floor's 0.500 ms: "
        "met in 0 of 1 (1t p50 0.61 ms = 1.22x)"
    )
    faster = [*ROWS[:-1], row("BoltMQ", "produce", "one-at-a-time", 900, p50=0.6)]
    assert (
        "0.500 ms: met in 1 of 1 (1t p50 0.60 ms = 1.20x)"
        in report.target_lines(faster, [FLOOR])[4]
    )


def test_no_floor_line_without_a_floor() -> None:
    assert report.floor_lines([]) == []
    assert len(report.target_lines(ROWS, [])) == 4
    (text, blank) = report.floor_lines([FLOOR])
    assert "1,000 msg/s, p50 0.500 ms, p99 0.900 ms" in text and blank == ""


def test_several_passes_are_judged_on_the_median_of_ratios_within_a_pass() -> None:
    # Pass 1 is slow for both systems: each pass's own ratio is what counts.
    rows = [
        row("BoltMQ", "consume", "batched", 150_000, at=0),
        row("Redis Streams", "consume", "batched", 100_000, at=0),  # 1.50x
        row("BoltMQ", "consume", "batched", 75_000, at=1),
        row("Redis Streams", "consume", "batched", 40_000, at=1),  # 1.875x
        row("BoltMQ", "consume", "batched", 130_000, at=2),
        row("Redis Streams", "consume", "batched", 100_000, at=2),  # 1.30x
    ]
    assert report.target_lines(rows)[2] == (
        "- consume batched, BoltMQ >= 1.5x Redis Streams: met in 1 of 1 (1p/1t 1.50 (1.30-1.88))"
    )
    worse = [rows[0], row("Redis Streams", "consume", "batched", 110_000, at=0), *rows[2:]]
    assert "met in 0 of 1 (1p/1t 1.36 (1.30-1.88))" in report.target_lines(worse)[2]


def test_the_table_holds_each_median_pass_and_every_pass_rate() -> None:
    rows = [
        row("BoltMQ", "produce", "batched", rate, at=at)
        for at, rate in enumerate((60_000, 30_000, 50_000))
    ] + [
        row("Redis Streams", "produce", "batched", rate, at=at)
        for at, rate in enumerate((50_000, 40_000, 45_000))
    ]
    assert [r.msgs_per_s for r in report.medians(rows)] == [50_000, 45_000]
    head, _, *lines = report.markdown_table(rows)
    assert head.endswith("| BoltMQ / this | msg/s of each pass |")
    bolt, redis = sorted(lines, key=lambda line: "Redis" in line)
    assert "| 50,000 |" in bolt and bolt.endswith("| 1.00 | 60,000, 30,000, 50,000 |")
    assert "| 45,000 |" in redis and redis.endswith("| 1.11 | 50,000, 40,000, 45,000 |")
    one_pass = report.markdown_table([r for r in rows if r.pass_index == 0])
    assert one_pass[0].endswith("| BoltMQ / this |") and len(one_pass) == 4


def test_each_pass_has_its_own_floor() -> None:
    slow = dataclasses.replace(FLOOR, p50_ms=1.0)
    rows = [
        row("BoltMQ", "produce", "one-at-a-time", 800, p50=0.55, at=0),  # 1.10x its 0.5
        row("BoltMQ", "produce", "one-at-a-time", 500, p50=1.3, at=1),  # 1.30x its 1.0
        row("BoltMQ", "produce", "one-at-a-time", 800, p50=0.58, at=2),  # 1.16x its 0.5
    ]
    (line,) = report.target_lines(rows, [FLOOR, slow, FLOOR])
    assert line.endswith("floor's 0.500 ms: met in 1 of 1 (1t p50 0.58 ms = 1.16x (1.10-1.30))")
    (text, _) = report.floor_lines([FLOOR, slow, FLOOR])
    assert "p50 of each pass 0.500, 1.000, 0.500 ms; median pass: 1,000 msg/s" in text
