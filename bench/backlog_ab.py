"""``python -m bench backlog --head-only``: the head consumer with and without an old reader,
A/B over store settings in one run.

The backlog is written once (:class:`bench.backlog.Run`'s fill), then ``rounds``
rounds alternate the arms (A: the store's settings as the command gives them plus
``--a SETTING=VALUE``; B: the same plus ``--b SETTING=VALUE`` instead), so both
arms see the same machine at nearly the same time. Each round restarts the
store with its arm's settings (a clean restart: its first flush round releases
every page behind the window again, so the old reader starts cold) and measures:

- ``alone``: the head probe (:class:`bench.backlog_load.HeadProbe`) for ``probe_s``;
- ``with-old-reader``: the head probe while the old reader (its own process,
  ``PullQueues`` over every queue from offset 0) reads the whole backlog: the
  head's latency, the reader's rate and its calls' latency, what the store read
  from disk, and the store's threads (CPU seconds and major page faults of
  each thread that used any: where the store's time went).

The report (:class:`HeadRound` per round, then per arm the median of its rounds
and B/A ratios) is printed; ``--json`` writes it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.backlog import Run, Settings, percentiles_ms
from bench.backlog_load import HeadProbe
from boltmq.cli.dev.launcher import REPO_ROOT
from boltmq.cli.messages import fail

TICKS = os.sysconf("SC_CLK_TCK")


def thread_stats(pid: int) -> dict[str, tuple[float, int]]:
    """``{"<name>/<tid>": (cpu seconds, major faults)}`` of every thread of ``pid``."""
    stats: dict[str, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        stats[f"{name}/{task.name}"] = (cpu, int(fields[9]))
    return stats


def thread_delta(
    before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]]
) -> dict[str, dict[str, float]]:
    """Per thread that used any CPU or faulted between the two samples: its CPU seconds
    and major faults, busiest first."""
    rows = {}
    for name, (cpu, faults) in after.items():
        cpu0, faults0 = before.get(name, (0.0, 0))
        if cpu - cpu0 > 0 or faults - faults0 > 0:
            rows[name] = {"cpu_s": round(cpu - cpu0, 2), "major_faults": faults - faults0}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]["cpu_s"]))


@dataclass
class HeadRound:
    """One round of one arm."""

    arm: str
    alone_ms: dict[str, float | None] = field(default_factory=dict)
    with_reader_ms: dict[str, float | None] = field(default_factory=dict)
    reader_msgs_per_s: float = 0.0
    reader_seconds: float = 0.0
    reader_call_ms: dict[str, float | None] = field(default_factory=dict)
    store_disk_read_bytes: int = 0
    store_threads: dict[str, dict[str, float]] = field(default_factory=dict)


class HeadRun(Run):
    """The fill, then the head rounds (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        arms: tuple[tuple[str, ...], tuple[str, ...]],
        rounds: int,
        echo: Any = print,
    ) -> None:
        super().__init__(settings, data_dir, echo)
        self.arms = arms
        self.rounds = rounds
        self.arm = "A"
        self.head_rounds: list[HeadRound] = []

    def _store_settings(self, forced_clean: int = 100) -> list[str]:
        return super()._store_settings(forced_clean) + list(self.arms["AB".index(self.arm)])

    def execute_head(self) -> list[HeadRound]:
        self.root.mkdir(parents=True)
        self.rss.start()
        try:
            self._start_store()
            self._fill()
            for n in range(self.rounds):
                self.arm = "AB"[n % 2]
                assert self.store is not None
                self.store.stop()
                self._start_store()
                self.head_rounds.append(self._round())
        finally:
            self.rss.stop()
            if self.store is not None:
                self.store.stop()
        return self.head_rounds

    def _round(self) -> HeadRound:
        assert self.store is not None and self.store.proc is not None
        one = HeadRound(self.arm)
        probe = HeadProbe(self.store.address, self.s.body_bytes).start()
        try:
            self._phase(f"round {len(self.head_rounds) + 1} ({self.arm}): head alone")
            time.sleep(self.s.probe_s)
            one.alone_ms = percentiles_ms(probe.take())
            self._phase(f"round {len(self.head_rounds) + 1} ({self.arm}): old reader")
            pid = self.store.proc.pid
            threads, disk = thread_stats(pid), self._store_read_bytes()
            start = time.perf_counter()
            done = self._read_all()
            one.reader_seconds = round(time.perf_counter() - start, 2)
            one.store_disk_read_bytes = self._store_read_bytes() - disk
            one.store_threads = thread_delta(threads, thread_stats(pid))
            one.with_reader_ms = percentiles_ms(probe.take())
            one.reader_msgs_per_s = round(done["done"] / one.reader_seconds)
            one.reader_call_ms = percentiles_ms(done["calls_ns"])
        finally:
            probe.stop()
        return one

    def _read_all(self) -> dict[str, Any]:
        assert self.store is not None
        reader = subprocess.run(
            [sys.executable, "-m", "bench.backlog_load", "--store", self.store.address],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            check=False,
        )
        if reader.returncode != 0:
            raise RuntimeError(f"the old reader failed: {reader.stderr[-2000:]}")
        done: dict[str, Any] = json.loads(reader.stdout.splitlines()[-1])
        return done


def _median(rounds: list[HeadRound], pick: Any) -> float:
    values = [v for v in (pick(r) for r in rounds) if v is not None]
    return float(statistics.median(values)) if values else float("nan")


SUMMARY = {
    "head alone p50 ms": lambda r: r.alone_ms["p50"],
    "head alone p99 ms": lambda r: r.alone_ms["p99"],
    "head with reader p50 ms": lambda r: r.with_reader_ms["p50"],
    "head with reader p99 ms": lambda r: r.with_reader_ms["p99"],
    "head with reader max ms": lambda r: r.with_reader_ms["max"],
    "reader msg/s": lambda r: r.reader_msgs_per_s,
    "reader call p50 ms": lambda r: r.reader_call_ms["p50"],
    "reader call p99 ms": lambda r: r.reader_call_ms["p99"],
    "store disk read MiB": lambda r: r.store_disk_read_bytes / 2**20,
}


def summarize(rounds: list[HeadRound]) -> dict[str, dict[str, float]]:
    """Per summary figure: the median of each arm's rounds and B/A."""
    table = {}
    for name, pick in SUMMARY.items():
        a = _median([r for r in rounds if r.arm == "A"], pick)
        b = _median([r for r in rounds if r.arm == "B"], pick)
        table[name] = {"A": round(a, 3), "B": round(b, 3), "B/A": round(b / a, 3) if a else 0.0}
    return table


def format_rounds(
    rounds: list[HeadRound], arms: tuple[tuple[str, ...], tuple[str, ...]]
) -> list[str]:
    """The printed report."""
    lines = [f"head rounds; A: {' '.join(arms[0]) or '-'}; B: {' '.join(arms[1]) or '-'}"]
    for n, r in enumerate(rounds, 1):
        lines.append(
            f"  round {n} {r.arm}: alone p50 {r.alone_ms['p50']} p99 {r.alone_ms['p99']} ms; "
            f"with reader p50 {r.with_reader_ms['p50']} p99 {r.with_reader_ms['p99']} "
            f"max {r.with_reader_ms['max']} ms; reader {r.reader_msgs_per_s:,.0f} msg/s, "
            f"calls p50 {r.reader_call_ms['p50']} p99 {r.reader_call_ms['p99']} ms; "
            f"disk read {r.store_disk_read_bytes / 2**20:,.0f} MiB"
        )
        for name, row in list(r.store_threads.items())[:4]:
            lines.append(f"    {name}: {row['cpu_s']} s CPU, {row['major_faults']} major faults")
    for name, row in summarize(rounds).items():
        lines.append(f"  {name:<26} A {row['A']:>12,.3f}  B {row['B']:>12,.3f}  B/A {row['B/A']}")
    return lines


def report_json(
    rounds: list[HeadRound], arms: tuple[tuple[str, ...], tuple[str, ...]], settings: Settings
) -> str:
    return json.dumps(
        {
            "settings": asdict(settings),
            "a_settings": list(arms[0]),
            "b_settings": list(arms[1]),
            "rounds": [asdict(r) for r in rounds],
            "summary": summarize(rounds),
        },
        indent=2,
    )


def run_head_rounds(
    settings: Settings,
    data_dir: Path,
    keep: bool,
    json_path: Path | None,
    rounds: int,
    arms: tuple[tuple[str, ...], tuple[str, ...]],
) -> None:
    """``backlog --head-only``: the rounds, printed (and written to ``json_path``)."""
    for setting in (*arms[0], *arms[1]):
        if "=" not in setting:
            raise click.BadParameter(f"{setting!r} is not SETTING=VALUE", param_hint="--a/--b")
    run = HeadRun(settings, data_dir, arms, rounds, echo=lambda x: click.echo(x, err=True))
    failure = run.attempt(run.execute_head, keep)
    if run.head_rounds:
        for line in format_rounds(run.head_rounds, arms):
            click.echo(line)
        if json_path is not None:
            json_path.write_text(report_json(run.head_rounds, arms, settings) + "\n")
    if failure is not None:
        raise fail(failure)
