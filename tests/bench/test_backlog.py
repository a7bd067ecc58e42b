"""``python -m bench backlog`` end to end with a tiny backlog (seconds), and its bad options.

The checks are on what the report is made of: every phase measured, lookups that
answered, a crash recovery that re-read only what its checkpoint did not cover,
retention that deleted segments, a run directory that is gone afterwards; never on
how fast anything was (tests/reliability/test_backlog.py judges the rates and memory
of a larger run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import bench
from tests.bench import SMALL_BACKLOG, run_bench

pytest.importorskip("psutil", reason="psutil is in the bench extra")

SEGMENT = 2**20


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("backlog")
    done = run_bench(
        "bench",
        "backlog",
        *SMALL_BACKLOG,
        "--retention-seconds",
        "2.5",
        "--lookups",
        "10",
        "--key-every-message",
        "--data-dir",
        str(out / "data"),
        "--json",
        str(out / "report.json"),
        timeout_s=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "backlog: 20,000 messages of 100 B over 64 queues" in done.stdout
    assert list((out / "data").iterdir()) == []  # the run's directory is deleted
    loaded: dict = json.loads((out / "report.json").read_text())
    return loaded


def test_every_phase_is_measured(report: dict) -> None:
    assert set(report["rates"]) == {"produce-empty", "fill", "produce-backlog", "old-reader"}
    assert all(rate > 0 for rate in report["rates"].values())
    assert len(report["fill_tenths"]) == 10 and len(report["reader_tenths"]) == 10
    assert set(report["head_ms"]) == {"alone", "with-old-reader", "retention"}
    assert all(p["count"] > 0 for p in report["head_ms"].values())
    assert report["messages_stored"] >= 20_000


def test_every_lookup_answered(report: dict) -> None:
    # the bench fails the run when a key, an id or an offset by time is not found
    assert {k: v["count"] for k, v in report["lookup_ms"].items()} == {
        "key": 10,
        "msg-id": 10,
        "offset-by-time": 10,
    }


def test_crash_recovery_rereads_only_what_the_checkpoint_did_not_cover(report: dict) -> None:
    crash = report["restarts"]["crash"]
    # not_covered_bytes is the bench's own reading of the checkpoint and the segments' first
    # records; a run this short may leave the checkpoint's horizon before the first segment
    assert 0 < crash["reread_bytes"] <= crash["not_covered_bytes"] <= crash["commitlog_bytes"]
    clean = report["restarts"]["clean"]
    assert clean["checked_bytes"] <= 3 * SEGMENT  # a clean start checks the last 3 segments


def test_retention_deleted_the_oldest_segments_while_the_head_ran(report: dict) -> None:
    retention = report["retention"]
    assert retention["forced_clean_watermark_percent"] < retention["disk_used_percent"]
    assert retention["deleted_segments"] >= 1
    assert retention["deleted_bytes"] == retention["deleted_segments"] * SEGMENT
    assert retention["head_produce_msgs_per_s"] > 0


def test_rss_is_sampled_for_every_process(report: dict) -> None:
    assert set(report["rss_mib"]["old-reader"]) == {"bench", "store", "old-reader"}
    assert report["settings"]["key_every_message"] is True
    assert report["fill_index_rss_mib"] > 0  # the store's index mappings, from its smaps
    assert len(report["reader_store_rss_mib"]) == 10
    assert report["store_rss_bound_mib"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--messages", "10", "--data-dir", "/tmp"], "10 is not in the range x>=1024"),
        (["--messages", "5000"], "Missing option '--data-dir'"),
        (["--data-dir", "/tmp", "--queues", "0"], "0 is not in the range 1<=x<=1024"),
        (["--data-dir", "/tmp", "--body-bytes", "4"], "4 is not in the range 8<=x<=65536"),
        (["--data-dir", "/tmp", "--index-window-mb", "-1"], "-1 is not in the range 0<=x<=65536"),
    ],
)
def test_bad_options_are_refused(args: list[str], message: str) -> None:
    done = CliRunner().invoke(bench, ["backlog", *args])
    assert done.exit_code == 2
    assert message in done.output


def test_an_unwritable_data_dir_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = CliRunner().invoke(
        bench, ["backlog", "--messages", "2048", "--data-dir", str(blocker / "x")]
    )
    assert done.exit_code == 1
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert done.output.startswith("Error: ") and "x" in done.output
