"""DevCluster: a ``boltmq dev`` process for a benchmark, and rounds over several of them.

A benchmark that compares set-ups of the whole cluster (plain against TLS + ACL,
one broker group against two, today against an older checkout) starts one
``boltmq dev`` per set-up on free ports, reads the endpoints and client
credentials its banner prints, and runs the same workloads on each in rounds;
each round starts with the next cluster, so a drift of the shared machine
touches every one alike (:func:`run_rounds`). After each round one line per
workload and cluster gives its rate as a ratio of the first cluster's.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import BenchResult
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS

REPO_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
READY_LINE = "press Ctrl-C to stop"


@dataclass
class DevCluster:
    """One ``boltmq dev`` process and what a client needs to reach it."""

    name: str
    flags: tuple[str, ...]
    checkout: Path = REPO_ROOT
    """The BoltMQ checkout whose ``boltmq dev`` runs (its root on PYTHONPATH)."""
    proc: subprocess.Popen[str] | None = None
    registry: str = ""
    sdk: dict[str, Any] = field(default_factory=dict)

    def start(self, data_dir: Path) -> None:
        ports = ("--registry-port", "0", "--store-port", "0", "--broker-port", "0")
        # no web console, no MQTT gateway (on fixed ports, a second cluster's would clash),
        # where the checkout's `boltmq dev` has them (an older baseline has neither)
        main = (self.checkout / "boltmq" / "cli" / "main.py").read_text()
        extras = ("--no-console", "--mqtt-port", "-1") if "--no-console" in main else ()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "boltmq.cli", "dev", "--data-dir", str(data_dir)]
            + [*ports, "--ha-port", "0", *extras, *self.flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=self.checkout,
            env=dict(os.environ, PYTHONPATH=str(self.checkout)),
            start_new_session=True,
        )
        banner = self._banner()
        self.registry = next(line.split()[1] for line in banner if line.startswith("registry"))
        tls = dict(re.findall(r"--tls-(ca|cert|key) (\S+)", " ".join(banner)))
        if tls:
            self.sdk["tls"] = ClientTLS.from_files(tls["ca"], tls["cert"], tls["key"])
        acl = re.search(
            r"BOLTMQ_ACCESS_KEY=(\S+) BOLTMQ_SECRET_KEY=\$\(cat (\S+)\)", "\n".join(banner)
        )
        if acl:
            secret = Path(acl.group(2)).read_text().strip()
            self.sdk["credentials"] = Credentials(acl.group(1), secret)

    def _banner(self) -> list[str]:
        """The lines ``boltmq dev`` prints up to READY_LINE (it is stopped if it takes longer
        than START_TIMEOUT_S; readline, not select, since a text pipe buffers lines)."""
        assert self.proc is not None and self.proc.stdout is not None
        lines: list[str] = []
        watchdog = threading.Timer(START_TIMEOUT_S, self.stop)
        watchdog.start()
        try:
            while READY_LINE not in lines:
                line = self.proc.stdout.readline()
                if not line:
                    raise SystemExit(f"{self.name}: boltmq dev did not start: {lines}")
                lines.append(line.rstrip("\n"))
        finally:
            watchdog.cancel()
        return lines

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()


Workloads = Callable[["DevCluster", int], dict[str, BenchResult]]
"""Runs every workload of one round on a cluster: results by workload name."""


def run_rounds(clusters: Sequence[DevCluster], rounds: int, workloads: Workloads) -> None:
    """Start every cluster, run ``rounds`` rounds of ``workloads`` (each round starting
    with the next cluster), print the ratios to ``clusters[0]``, stop them all."""
    clusters = list(clusters)
    with tempfile.TemporaryDirectory(prefix="boltmq-bench-clusters-") as scratch:
        try:
            for index, cluster in enumerate(clusters):
                cluster.start(Path(scratch) / f"cluster-{index}")
            for round_no in range(1, rounds + 1):
                shift = (round_no - 1) % len(clusters)
                order = clusters[shift:] + clusters[:shift]
                got = {c.name: workloads(c, round_no) for c in order}
                print_ratios(round_no, clusters[0].name, got)
        finally:
            for cluster in reversed(clusters):
                cluster.stop()


def print_ratios(round_no: int, base_name: str, got: dict[str, dict[str, BenchResult]]) -> None:
    """One line per workload and cluster: its rate over ``base_name``'s, this round."""
    for workload, base in got[base_name].items():
        for name, results in got.items():
            if name == base_name:
                continue
            other = results[workload]
            ratio = other.msgs_per_s / base.msgs_per_s
            print(
                f"round {round_no} {workload}: {name} {other.msgs_per_s:,.0f} msg/s "
                f"vs {base_name} {base.msgs_per_s:,.0f} = {ratio:.2f}x"
            )
