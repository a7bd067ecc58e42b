"""``python -m bench backlog --head-only`` end to end with a tiny backlog, and its bad options.

Two rounds (A then B, each on a restarted store with its arm's settings): every
round measured the head alone and with the old reader, the reader read the whole
backlog, and the store's threads were sampled; the summary has both arms. Never
how fast anything was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import bench
from tests.bench import SMALL_BACKLOG, run_bench

pytest.importorskip("psutil", reason="psutil is in the bench extra")


def test_head_only_rounds_alternate_the_arms(tmp_path: Path) -> None:
    done = run_bench(
        "bench",
        "backlog",
        "--head-only",
        "--rounds",
        "2",
        *SMALL_BACKLOG,
        "--a",
        "max_transfer_count_on_message_in_disk=8192",
        "--b",
        "max_transfer_count_on_message_in_disk=4",
        "--data-dir",
        str(tmp_path / "data"),
        "--json",
        str(tmp_path / "report.json"),
        timeout_s=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert list((tmp_path / "data").iterdir()) == []  # the run's directory is deleted
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["a_settings"] == ["max_transfer_count_on_message_in_disk=8192"]
    assert report["b_settings"] == ["max_transfer_count_on_message_in_disk=4"]
    rounds = report["rounds"]
    assert [r["arm"] for r in rounds] == ["A", "B"]
    for one in rounds:
        assert one["alone_ms"]["count"] > 0 and one["with_reader_ms"]["count"] > 0
        assert one["reader_msgs_per_s"] > 0 and one["reader_call_ms"]["count"] > 0
        assert any(t["cpu_s"] > 0 for t in one["store_threads"].values())
    # B's cold pulls take 4 messages each: its reader needs more calls for the same backlog
    assert rounds[1]["reader_call_ms"]["count"] > rounds[0]["reader_call_ms"]["count"]
    assert set(report["summary"]["head with reader p99 ms"]) == {"A", "B", "B/A"}
    assert "round 2 B: alone p50" in done.stdout


@pytest.mark.parametrize("option", ["--a", "--b"])
def test_an_arm_setting_without_a_value_is_refused(tmp_path: Path, option: str) -> None:
    done = CliRunner().invoke(
        bench, ["backlog", "--head-only", option, "nonsense", "--data-dir", str(tmp_path)]
    )
    assert done.exit_code == 2
    assert "'nonsense' is not SETTING=VALUE" in done.output
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
