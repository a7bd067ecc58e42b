"""The side-by-side targets computed from a table's rows and the floor of the same run."""

from __future__ import annotations

from bench.compare import report
from bench.compare.workload import Row
from bench.relay_floor import Floor

FLOOR = Floor("push", "stream", 1, 1, 1024, 1000, 1.0, 0.5, 0.9, (1.0, 1.0, 1.0))


def row(system: str, scenario: str, mode: str, rate: int, p50: float | None = None) -> Row:
    producers = 64 if mode == "concurrent-sends" else 1
    return Row(system, scenario, mode, producers, 1, rate, 1.0, 1024, p50, p50)


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
    (line,) = report.target_lines(ROWS, FLOOR)[4:]
    assert line == (
        "- produce one-at-a-time, 1 producer, BoltMQ p50 <= 1.2x the floor's 0.500 ms: "
        "met in 0 of 1 (1t p50 0.61 ms = 1.22x)"
    )
    faster = [*ROWS[:-1], row("BoltMQ", "produce", "one-at-a-time", 900, p50=0.6)]
    assert (
        "0.500 ms: met in 1 of 1 (1t p50 0.60 ms = 1.20x)" in report.target_lines(faster, FLOOR)[4]
    )


def test_no_floor_line_without_a_floor() -> None:
    assert report.floor_lines(None) == []
    assert len(report.target_lines(ROWS, None)) == 4
    (text, blank) = report.floor_lines(FLOOR)
    assert "1,000 msg/s, p50 0.500 ms, p99 0.900 ms" in text and blank == ""
