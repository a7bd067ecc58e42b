"""``python -m bench.security_cost``: what mutual TLS and the ACL cost on the hot path.

Two local clusters run side by side: ``boltmq dev`` (plaintext, no ACL) and
``boltmq dev --tls --acl`` (mutual TLS on every call, component identities checked on
the internal ports, every broker call signed with an account and checked against the
ACL, replay cache on). The same workloads run on both, alternating which goes first in
each round so a drift of the shared machine touches both alike:

- ``batched``: ``--count`` messages of ``--size`` bytes, batches of 256, 2 threads;
- ``one at a time``: ``--single`` synchronous sends from one thread;
- ``consume``: a fresh group reads what ``batched`` wrote, 1024 per pull.

With ``--baseline CHECKOUT`` a third cluster runs in the rounds: plain ``boltmq dev``
started from another checkout of BoltMQ (an earlier revision, with its stubs generated),
so the plain figures of today are compared with the plain figures of that revision on
the same machine in the same minutes (whether the access gate, now always installed,
costs anything while TLS and the ACL are off). The client is this checkout's SDK.

Each result prints msg/s, MB/s and latency percentiles (per call), then one line per
workload and cluster with its rate as a ratio of the plain one in the same round. The
secured cluster's client uses the application certificate ``--tls`` issued and the
admin account ``--acl`` seeded. These print numbers; they assert nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster import bench_consume, bench_produce
from bench.report import BenchResult, format_result
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
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "boltmq.cli", "dev", "--data-dir", str(data_dir)]
            + [*ports, "--ha-port", "0", *self.flags],
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


def _round(
    cluster: DevCluster, round_no: int, count: int, single: int, size: int
) -> dict[str, BenchResult]:
    topic = f"SecurityCost{round_no}"
    sdk = cluster.sdk
    batched = bench_produce(cluster.registry, topic, count, size, 256, 2, sdk)
    results = {
        "batched": batched,
        "one at a time": bench_produce(cluster.registry, f"{topic}s", single, size, 1, 1, sdk),
        # what the batched sends stored (whole batches per thread), read back
        "consume": bench_consume(cluster.registry, topic, batched.messages, size, sdk),
    }
    for workload, outcome in results.items():
        print(f"[{cluster.name}, round {round_no}] {workload}: {format_result(outcome)}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000, help="messages, batched")
    parser.add_argument("--single", type=int, default=2_000, help="one-at-a-time sends")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline", type=Path, help="another BoltMQ checkout: its plain cluster runs too"
    )
    args = parser.parse_args(argv)
    for name in ("count", "single", "size", "rounds"):
        if getattr(args, name) < (0 if name == "size" else 1):
            parser.error(f"--{name} must be positive")
    clusters = [DevCluster("plain", ()), DevCluster("tls+acl", ("--tls", "--acl"))]
    if args.baseline is not None:
        if not (args.baseline / "boltmq" / "v1" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline}: not a checkout with generated stubs")
        clusters.append(DevCluster("plain@baseline", (), args.baseline.resolve()))
    with tempfile.TemporaryDirectory(prefix="boltmq-security-cost-") as scratch:
        try:
            for index, cluster in enumerate(clusters):
                cluster.start(Path(scratch) / f"cluster-{index}")
            for round_no in range(1, args.rounds + 1):
                # Each round starts with the next cluster: drift touches every one alike.
                shift = (round_no - 1) % len(clusters)
                order = clusters[shift:] + clusters[:shift]
                got = {
                    c.name: _round(c, round_no, args.count, args.single, args.size) for c in order
                }
                _print_ratios(round_no, got)
        finally:
            for cluster in reversed(clusters):
                cluster.stop()


def _print_ratios(round_no: int, got: dict[str, dict[str, BenchResult]]) -> None:
    """One line per workload and cluster: its rate over the plain cluster's, this round."""
    for workload, base in got["plain"].items():
        for name, results in got.items():
            if name == "plain":
                continue
            other = results[workload]
            ratio = other.msgs_per_s / base.msgs_per_s
            print(
                f"round {round_no} {workload}: {name} {other.msgs_per_s:,.0f} msg/s "
                f"vs plain {base.msgs_per_s:,.0f} = {ratio:.2f}x"
            )


if __name__ == "__main__":
    main()
