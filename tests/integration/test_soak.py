"""A short soak of the local cluster (``python -m bench soak``; ``make soak`` runs 10 minutes).

The invariants are checked, never a duration or a rate: every acknowledged
message reached a consumer, no service process grew its open file handles,
every service exited 0, and the time series files hold what was sampled.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.soak_run import SoakSpec, run_soak

pytest.importorskip("psutil", reason="the soak samples processes with psutil (bench extra)")

SPEC = SoakSpec(
    seconds=36, rate=400, producers=2, consumers=2, batch=8, sample_seconds=2, drain_timeout_s=60
)


def test_short_soak_loses_nothing_and_leaks_no_handles(tmp_path: Path) -> None:
    result = run_soak(SPEC, tmp_path / "out", tmp_path / "data")

    verdicts = {(v.rule, v.subject): v for v in result.verdicts}
    assert verdicts[("nothing lost", "cluster")].ok, verdicts[("nothing lost", "cluster")]
    assert verdicts[("clean exit", "cluster")].ok, verdicts[("clean exit", "cluster")]
    for service in ("registry", "store", "broker"):
        handles = verdicts[("handles flat", service)]
        assert handles.ok, handles
        assert ("memory flat", service) in verdicts  # judged (its outcome is the 10-min run's)
    summary = result.summary
    assert summary["acknowledged"] == summary["received"] and summary["missing"] == 0
    assert summary["acknowledged"] > 0 and summary["failed_sends"] == 0

    with (tmp_path / "out" / "soak.csv").open() as samples:
        rows = list(csv.DictReader(samples))
    assert len(rows) == len(result.samples) >= 2 * 3
    assert {"store_anon_mib", "broker_fds", "registry_rss_mib"} <= set(rows[0])
    assert sum(float(r["received_per_s"]) for r in rows) > 0
    saved = json.loads((tmp_path / "out" / "soak.json").read_text())
    assert saved["summary"]["acknowledged"] == summary["acknowledged"]
    assert len(saved["samples"]) == len(rows)
