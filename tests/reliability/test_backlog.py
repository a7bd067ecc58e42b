"""A store holding a backlog keeps its pace: ``python -m bench backlog`` at
``BOLTMQ_BACKLOG_MESSAGES`` messages (``make test-reliability``: 2,000,000), judged.

Every bound is computed from the same run, never a wall-clock constant:

- produce with the backlog in place keeps at least ``PRODUCE_RATIO`` of the empty
  store's rate;
- the reader from offset 0 does not slow down as it goes: the mean rate of its last
  three tenths of the backlog is at least ``DECLINE_RATIO`` of its first three's;
- the head consumer's median latency with that reader running stays within
  ``HEAD_RATIO`` of its median alone (plus one scheduling tick);
- the store's RSS never exceeds what the page-cache window lets it map (its RSS
  before the fill + the window + what the reader brings back between two sweeps),
  and the writer's tenths end no higher than ``RSS_RATIO`` of where they began;
- crash recovery re-reads no more than the checkpoint left uncovered, and less
  than half the CommitLog; retention deleted the oldest segments.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.bench import run_bench
from tests.reliability.scale import BACKLOG_MESSAGES

pytestmark = [
    pytest.mark.skipif(
        BACKLOG_MESSAGES == 0, reason="BOLTMQ_BACKLOG_MESSAGES is not set (make test-reliability)"
    ),
    pytest.mark.timeout(3100),  # the run itself: minutes at 2,000,000 messages
]

PRODUCE_RATIO = 0.5
DECLINE_RATIO = 0.5
HEAD_RATIO = 3.0
HEAD_TICK_MS = 10.0
RSS_RATIO = 1.5
RSS_SLACK = 1.25
"""The store's RSS bound is a model (window + one sweep of reads); this much above it."""
SEGMENT_MB = 64


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("backlog")
    done = run_bench(
        "bench",
        "backlog",
        "--messages",
        str(BACKLOG_MESSAGES),
        "--segment-mb",
        str(SEGMENT_MB),
        "--window-mb",
        str(SEGMENT_MB),
        "--probe-seconds",
        "3",
        "--retention-seconds",
        "5",
        "--lookups",
        "100",
        "--data-dir",
        str(out / "data"),
        "--json",
        str(out / "report.json"),
        timeout_s=3000,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded: dict = json.loads((out / "report.json").read_text())
    return loaded


def test_produce_keeps_its_rate_with_the_backlog(report: dict) -> None:
    rates = report["rates"]
    assert rates["produce-backlog"] >= PRODUCE_RATIO * rates["produce-empty"], rates


def test_the_old_reader_does_not_slow_down(report: dict) -> None:
    tenths = report["reader_tenths"]
    assert len(tenths) == 10
    assert statistics.mean(tenths[-3:]) >= DECLINE_RATIO * statistics.mean(tenths[:3]), tenths


def test_the_head_consumer_is_not_held_up_by_the_old_reader(report: dict) -> None:
    alone, shared = report["head_ms"]["alone"], report["head_ms"]["with-old-reader"]
    assert shared["count"] > 0 and alone["count"] > 0
    assert shared["p50"] <= HEAD_RATIO * alone["p50"] + HEAD_TICK_MS, report["head_ms"]


def test_store_memory_is_bounded_by_the_page_cache_window(report: dict) -> None:
    bound = report["store_rss_bound_mib"] * RSS_SLACK
    for phase, row in report["rss_mib"].items():
        assert row.get("store", 0) <= bound, (phase, row, bound)
    fill = report["fill_store_rss_mib"]
    assert max(fill[-3:]) <= RSS_RATIO * max(fill[:3]) + SEGMENT_MB, fill
    for name in ("bench",):
        samples = [row[name] for row in report["rss_mib"].values() if name in row]
        assert max(samples) <= RSS_RATIO * min(samples), (name, samples)


def test_crash_recovery_reads_only_what_the_checkpoint_does_not_cover(report: dict) -> None:
    crash = report["restarts"]["crash"]
    assert 0 < crash["reread_bytes"] <= crash["not_covered_bytes"], crash
    assert crash["reread_bytes"] < crash["commitlog_bytes"] / 2, crash


def test_lookups_answer_and_retention_deletes_the_oldest_segments(report: dict) -> None:
    assert all(v["count"] == 100 for v in report["lookup_ms"].values())
    retention = report["retention"]
    assert retention["deleted_segments"] >= 1
    assert retention["deleted_bytes"] == retention["deleted_segments"] * SEGMENT_MB * 2**20


def test_the_run_directory_is_removed(report: dict) -> None:
    assert not Path(report["store_dir"]).exists()
