"""What a soak run measured, the rules it is judged by, and the files it writes.

A soak run (:mod:`bench.soak_run`) records one :class:`Sample` every few
seconds. The judgement reads only those samples and the delivery counts:

- **memory flat**: for every service process, the least-squares slope of its
  anonymous memory (RSS minus file-backed resident pages) over the samples of
  the second half of the run is at most ``rss_slope_max_mib_per_min``. The
  first half is the warm-up (heaps reach their working size, the allocator
  keeps freed buffers: :mod:`boltmq.kernel.allocator`). File-backed pages are left
  out on purpose: the store maps its CommitLog, so its plain RSS grows with
  every page written and shrinks when the kernel reclaims page cache, which
  is neither a leak nor under the process's control.
- **handles flat**: for every service process, no sample of the second half
  has more open file descriptors than the first half's maximum plus
  ``fd_slack``. A leak grows without bound, so it passes that line; a file
  opened once (a new segment, a channel) is inside the first half's maximum.
- **nothing lost**: every message whose send was acknowledged arrived at a
  consumer (duplicates are counted, not failed: delivery is at least once).
- **clean exit**: every service stayed up and exited 0 on SIGTERM.

Files written into the output directory:

- ``soak.csv``: one row per sample, columns ``t_s, sent_per_s, received_per_s,
  send_p99_ms, e2e_p50_ms, e2e_p99_ms`` then ``<process>_anon_mib``,
  ``<process>_rss_mib``, ``<process>_fds``, ``<process>_threads`` per process;
- ``soak.json``: ``{"spec", "summary", "verdicts", "samples"}``;
- ``soak.png``: the same series as four charts (when matplotlib is installed,
  the ``bench`` extra).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.report import nearest_rank

MIB = 1024 * 1024


@dataclass
class ProcessSample:
    """One service process at one instant (from psutil)."""

    rss_mib: float
    anon_mib: float
    fds: int
    threads: int


@dataclass
class Sample:
    """The load over the last sampling window and every service process now."""

    t_s: float
    sent_per_s: float
    received_per_s: float
    send_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    processes: dict[str, ProcessSample] = field(default_factory=dict)


@dataclass(frozen=True)
class Limits:
    """Thresholds of the flatness rules (see the module docstring)."""

    rss_slope_max_mib_per_min: float = 1.0
    fd_slack: int = 2


@dataclass
class Verdict:
    """One rule applied to one subject: ``ok`` and the figure that decided it."""

    rule: str
    subject: str
    ok: bool
    detail: str


def percentile_ms(samples_ns: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1, nearest rank) of nanosecond samples, in ms; None if empty."""
    if not samples_ns:
        return None
    return round(nearest_rank(sorted(samples_ns), q) / 1e6, 3)


def slope_per_min(times_s: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against time, per minute (0 with < 2 points)."""
    if len(values) < 2 or len(set(times_s)) < 2:
        return 0.0
    return statistics.linear_regression(times_s, values).slope * 60


def judge_memory(samples: Sequence[Sample], limits: Limits) -> list[Verdict]:
    """The memory rule for every process present in the samples."""
    half = samples[-1].t_s / 2 if samples else 0.0
    late = [s for s in samples if s.t_s >= half]
    verdicts = []
    for name in _process_names(samples):
        points = [(s.t_s, s.processes[name].anon_mib) for s in late if name in s.processes]
        slope = slope_per_min([t for t, _ in points], [v for _, v in points])
        verdicts.append(
            Verdict(
                "memory flat",
                name,
                slope <= limits.rss_slope_max_mib_per_min,
                f"anonymous memory slope {slope:+.2f} MiB/min over the second half "
                f"({len(points)} samples; limit {limits.rss_slope_max_mib_per_min} MiB/min)",
            )
        )
    return verdicts


def judge_handles(samples: Sequence[Sample], limits: Limits) -> list[Verdict]:
    """The file-handle rule for every process present in the samples."""
    half = samples[-1].t_s / 2 if samples else 0.0
    verdicts = []
    for name in _process_names(samples):
        early = [s.processes[name].fds for s in samples if s.t_s < half and name in s.processes]
        late = [s.processes[name].fds for s in samples if s.t_s >= half and name in s.processes]
        if not early or not late:
            verdicts.append(
                Verdict("handles flat", name, False, "too few samples to compare the halves")
            )
            continue
        ok = max(late) <= max(early) + limits.fd_slack
        verdicts.append(
            Verdict(
                "handles flat",
                name,
                ok,
                f"open fds: first half max {max(early)}, second half max {max(late)} "
                f"(slack {limits.fd_slack})",
            )
        )
    return verdicts


def _process_names(samples: Sequence[Sample]) -> list[str]:
    names: dict[str, None] = {}
    for s in samples:
        names.update(dict.fromkeys(s.processes))
    return list(names)


def csv_columns(samples: Sequence[Sample]) -> list[str]:
    """The header of ``soak.csv``."""
    columns = ["t_s", "sent_per_s", "received_per_s", "send_p99_ms", "e2e_p50_ms", "e2e_p99_ms"]
    for name in _process_names(samples):
        columns += [f"{name}_anon_mib", f"{name}_rss_mib", f"{name}_fds", f"{name}_threads"]
    return columns


def csv_row(sample: Sample) -> dict[str, object]:
    """One row of ``soak.csv``."""
    row: dict[str, object] = {
        "t_s": sample.t_s,
        "sent_per_s": sample.sent_per_s,
        "received_per_s": sample.received_per_s,
        "send_p99_ms": sample.send_p99_ms,
        "e2e_p50_ms": sample.e2e_p50_ms,
        "e2e_p99_ms": sample.e2e_p99_ms,
    }
    for name, p in sample.processes.items():
        row.update(
            {
                f"{name}_anon_mib": p.anon_mib,
                f"{name}_rss_mib": p.rss_mib,
                f"{name}_fds": p.fds,
                f"{name}_threads": p.threads,
            }
        )
    return row


def write_outputs(
    out_dir: Path,
    spec: dict[str, object],
    summary: dict[str, object],
    verdicts: Sequence[Verdict],
    samples: Sequence[Sample],
) -> list[Path]:
    """Write ``soak.csv``, ``soak.json`` and (with matplotlib) ``soak.png``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "soak.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=csv_columns(samples))
        writer.writeheader()
        writer.writerows(csv_row(s) for s in samples)
    json_path = out_dir / "soak.json"
    json_path.write_text(
        json.dumps(
            {
                "spec": spec,
                "summary": summary,
                "verdicts": [asdict(v) for v in verdicts],
                "samples": [asdict(s) for s in samples],
            },
            indent=1,
            default=str,
        )
    )
    written = [csv_path, json_path]
    chart = draw_chart(out_dir / "soak.png", samples)
    if chart is not None:
        written.append(chart)
    return written


def draw_chart(path: Path, samples: Sequence[Sample]) -> Path | None:
    """Throughput, latency, anonymous memory and fds over time; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t = [s.t_s for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    axes[0].plot(t, [s.sent_per_s for s in samples], label="sent")
    axes[0].plot(t, [s.received_per_s for s in samples], label="received")
    axes[0].set_ylabel("msg/s")
    axes[1].plot(t, [s.send_p99_ms for s in samples], label="send p99")
    axes[1].plot(t, [s.e2e_p99_ms for s in samples], label="end-to-end p99")
    axes[1].set_ylabel("ms")
    for name in _process_names(samples):
        axes[2].plot(t, [_field(s, name, "anon_mib") for s in samples], label=name)
        axes[3].plot(t, [_field(s, name, "fds") for s in samples], label=name)
    axes[2].set_ylabel("anonymous MiB")
    axes[3].set_ylabel("open fds")
    axes[3].set_xlabel("seconds")
    for ax in axes:
        ax.legend(loc="upper left", fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle("BoltMQ soak")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _field(sample: Sample, name: str, attribute: str) -> float | None:
    process = sample.processes.get(name)
    return None if process is None else getattr(process, attribute)
