"""A short soak of the local cluster (``python -m bench soak``; ``make soak`` runs 10 minutes).

The invariants are checked, never a duration or a rate: every acknowledged
message reached a consumer exactly once (no fault is injected, and the load
starts once both consumers have rebalanced), no service process grew its open
file handles or its anonymous memory past a bound, every service exited 0, and
the time series files hold what was sampled.

Memory: 36 s is still the warm-up for the 10-minute run's slope rule (its
outcome is reported, not asserted here), so the short run bounds the growth
instead: the last sample's anonymous memory (RSS minus file-backed pages: the
store maps its CommitLog) is at most ``MEMORY_GROWTH_MAX_MIB`` above the first.
Measured: registry +0.0, store +4.9, broker +2.6 MiB over 34 s; a leak of 1 KiB
per message (~14,000 messages) would pass the bound.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.soak_run import SoakSpec, run_soak

pytest.importorskip("psutil", reason="the soak samples processes with psutil (bench extra)")

MEMORY_GROWTH_MAX_MIB = 12.0
SPEC = SoakSpec(
    seconds=36, rate=400, producers=2, consumers=2, batch=8, sample_seconds=2, drain_timeout_s=60
)


def test_short_soak_loses_nothing_and_leaks_no_handles_or_memory(tmp_path: Path) -> None:
    result = run_soak(SPEC, tmp_path / "out", tmp_path / "data")

    verdicts = {(v.rule, v.subject): v for v in result.verdicts}
    assert verdicts[("nothing lost", "cluster")].ok, verdicts[("nothing lost", "cluster")]
    assert verdicts[("clean exit", "cluster")].ok, verdicts[("clean exit", "cluster")]
    for service in ("registry", "store", "broker"):
        handles = verdicts[("handles flat", service)]
        assert handles.ok, handles
        assert ("memory flat", service) in verdicts  # judged (its outcome is the 10-min run's)
        first, last = result.samples[0].processes[service], result.samples[-1].processes[service]
        assert last.fds <= first.fds + SPEC.limits.fd_slack, (service, first.fds, last.fds)
        growth = last.anon_mib - first.anon_mib
        assert growth <= MEMORY_GROWTH_MAX_MIB, f"{service}: anonymous memory +{growth:.1f} MiB"
    summary = result.summary
    assert summary["acknowledged"] == summary["received"] and summary["missing"] == 0
    assert summary["duplicates"] == 0
    assert summary["acknowledged"] > 0 and summary["failed_sends"] == 0

    with (tmp_path / "out" / "soak.csv").open() as samples:
        rows = list(csv.DictReader(samples))
    assert len(rows) == len(result.samples) >= 2 * 3
    assert {"store_anon_mib", "broker_fds", "registry_rss_mib"} <= set(rows[0])
    assert sum(float(r["received_per_s"]) for r in rows) > 0
    saved = json.loads((tmp_path / "out" / "soak.json").read_text())
    assert saved["summary"]["acknowledged"] == summary["acknowledged"]
    assert len(saved["samples"]) == len(rows)
