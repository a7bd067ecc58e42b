"""The comparison's table, its section of ``bench/RESULTS.md`` and its charts.

Ratios: the column ``BoltMQ / this`` divides BoltMQ's msg/s by the row's for
the same scenario (mode, producers, topics), so a value of 1.5 means BoltMQ
moved 1.5 times as many messages per second as that system; BoltMQ's own rows
show 1.00. A system that did not run (not installed) has no rows; its reason
is listed under the table.

Under the table, the targets BoltMQ is held to (``RATE_TARGETS``): 64
concurrent senders at least 1.5x every peer, batched produce at least 1.2x
Redis Streams, consume at least 1.5x Redis Streams; and one sender waiting for
each result with a p50 at most 1.2x the two-hop streamed floor
(:func:`bench.relay_floor.measure`, nothing of BoltMQ), measured in the same
run after the systems.

With several passes over the systems (``--passes``), the table holds each
system's median pass of each scenario with every pass's msg/s, and a
target is judged on the median of its ratios, each ratio taken within one pass
(BoltMQ's row against the peer's of the same pass; the floor of the same pass):
rows of the same code move by a third between runs on a shared machine.

The section starts at the line ``SECTION_TITLE`` and runs to the next ``## ``
heading or the end of the file; writing it replaces only that span (or
appends it when absent).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.compare.workload import Row
from bench.relay_floor import Floor

SECTION_TITLE = "## Side by side"
BOLTMQ = "BoltMQ"
REDIS = "Redis Streams"


def passes(rows: Sequence[Row]) -> int:
    """How many passes over the systems ``rows`` come from."""
    return len({row.pass_index for row in rows}) or 1


def medians(rows: Sequence[Row]) -> list[Row]:
    """Each system's row of each scenario from its pass of median msg/s (the lower middle
    one for an even count); with one pass, ``rows`` as they are."""
    groups: dict[tuple[str, tuple[str, str, int, int]], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.system, row.key), []).append(row)
    return [sorted(g, key=lambda r: r.msgs_per_s)[(len(g) - 1) // 2] for g in groups.values()]


def boltmq_ratio(row: Row, rows: Sequence[Row]) -> float | None:
    """BoltMQ's msg/s over ``row``'s for the same scenario and pass; None if either is
    missing or 0."""
    return _over(row, [r for r in rows if r.pass_index == row.pass_index])


def _over(row: Row, rows: Sequence[Row]) -> float | None:
    """The msg/s of BoltMQ's row of ``row``'s scenario among ``rows`` over ``row``'s."""
    for other in rows:
        if other.system == BOLTMQ and other.key == row.key:
            if row.msgs_per_s > 0 and other.msgs_per_s > 0:
                return other.msgs_per_s / row.msgs_per_s
    return None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(rows: Sequence[Row]) -> list[str]:
    """The table as Markdown lines, one row per scenario and system (its median pass, with
    every pass's msg/s in a last column when there were several)."""
    several = passes(rows) > 1
    chosen = medians(rows)
    lines = [
        "| scenario | mode | producers | topics | system | messages | msg/s | MB/s "
        "| p50 ms | p99 ms | BoltMQ / this |" + (" msg/s of each pass |" if several else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if several else ""),
    ]
    for row in sorted(chosen, key=lambda r: (r.topics, r.scenario, r.mode, r.producers)):
        ratio = _over(row, chosen)  # the median passes: each system's may differ
        line = (
            f"| {row.scenario} | {row.mode} | {row.producers} | {row.topics} | {row.system} "
            f"| {row.messages:,} | {row.msgs_per_s:,.0f} | {row.mb_per_s:.1f} "
            f"| {_ms(row.p50_ms)} | {_ms(row.p99_ms)} "
            f"| {'-' if ratio is None else f'{ratio:.2f}'} |"
        )
        if several:
            each = sorted(
                (r for r in rows if r.system == row.system and r.key == row.key),
                key=lambda r: r.pass_index,
            )
            line += " " + ", ".join(f"{r.msgs_per_s:,.0f}" for r in each) + " |"
        lines.append(line)
    return lines


def replace_section(text: str, section: str) -> str:
    """``text`` with its side-by-side section replaced by ``section`` (appended if absent)."""
    lines = text.splitlines()
    try:
        begin = lines.index(SECTION_TITLE)
    except ValueError:
        return text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    end = next((i for i in range(begin + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    kept_after = lines[end:]
    joined = "\n".join(
        lines[:begin]
        + section.rstrip("\n").splitlines()
        + ([""] + kept_after if kept_after else [])
    )
    return joined + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace (or add) the side-by-side section of the results file at ``path``."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    path.write_text(replace_section(text, section))


def draw_charts(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    """One PNG per scenario kind: msg/s per system, grouped by topics and producers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    systems = list(dict.fromkeys(r.system for r in rows))
    for scenario, mode in dict.fromkeys((r.scenario, r.mode) for r in rows):
        chosen = [r for r in rows if (r.scenario, r.mode) == (scenario, mode)]
        groups = list(dict.fromkeys((r.topics, r.producers) for r in chosen))
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(groups) + 2), 4.5))
        width = 0.8 / len(systems)
        for i, system in enumerate(systems):
            values = [
                next(
                    (
                        r.msgs_per_s
                        for r in chosen
                        if r.system == system and (r.topics, r.producers) == g
                    ),
                    0,
                )
                for g in groups
            ]
            ax.bar([g + i * width for g in range(len(groups))], values, width, label=system)
        ax.set_xticks(
            [g + width * (len(systems) - 1) / 2 for g in range(len(groups))],
            [f"{t} topics\n{p} prod." for t, p in groups],
        )
        ax.set_ylabel("msg/s (1 KiB)")
        ax.set_title(f"{scenario}, {mode}")
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"compare-{scenario.replace('+', '-')}-{mode}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


RATE_TARGETS: tuple[tuple[str, str, float, str | None], ...] = (
    ("produce", "concurrent-sends", 1.5, None),
    ("produce", "batched", 1.2, REDIS),
    ("consume", "batched", 1.5, REDIS),
)
"""(scenario, mode, least BoltMQ / peer, the one peer it is against or None for every peer)."""
FLOOR_TARGET = 1.2
"""One sender waiting for each result: BoltMQ's p50 at most this times the floor's."""


def is_one_sender(row: Row) -> bool:
    """BoltMQ's row of one producer sending one message a call and waiting for it."""
    return (row.system, row.scenario, row.mode, row.producers) == (
        BOLTMQ,
        "produce",
        "one-at-a-time",
        1,
    )


def median_floor(floors: Sequence[Floor]) -> Floor | None:
    """The floor of median p50 among the passes' (the lower middle one); None without any."""
    ordered = sorted(floors, key=lambda f: f.p50_ms)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def floor_lines(floors: Sequence[Floor]) -> list[str]:
    """The line giving the two-hop floor of this run, and a blank line (none if not run)."""
    floor = median_floor(floors)
    if floor is None:
        return []
    if len(floors) > 1:
        each = ", ".join(f"{f.p50_ms:.3f}" for f in floors)
        measured = f"p50 of each pass {each} ms; median pass: "
    else:
        measured = ""
    return [
        "The two-hop streamed floor, measured after the systems in this run "
        "(`bench.relay_floor --call stream --batch 1`: a client, a relay and a sink in "
        f"Python gRPC, nothing of BoltMQ): {measured}"
        f"{floor.msgs_per_s:,.0f} msg/s, p50 {floor.p50_ms:.3f} ms, p99 {floor.p99_ms:.3f} ms.",
        "",
    ]


def _judged(ratios: list[float]) -> tuple[float, str]:
    """The median of ``ratios`` (one per pass), and the range printed after it (several)."""
    middle = statistics.median(ratios)
    spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    return middle, spread


def target_lines(rows: Sequence[Row], floors: Sequence[Floor] = ()) -> list[str]:
    """For each target: how many of this run's scenarios meet it, and the ratios (each the
    median over the passes of the ratio within a pass; ``floors``: one per pass, in order)."""
    lines = []
    peers = [s for s in dict.fromkeys(r.system for r in rows) if s != BOLTMQ]
    for scenario, mode, least, only in RATE_TARGETS:
        for peer in peers if only is None else [p for p in peers if p == only]:
            mine = [
                r for r in rows if r.system == peer and (r.scenario, r.mode) == (scenario, mode)
            ]
            met, details = 0, []
            for key in dict.fromkeys(r.key for r in mine):
                ratios = [
                    x for r in mine if r.key == key if (x := boltmq_ratio(r, rows)) is not None
                ]
                label = f"{key[2]}p/{key[3]}t"
                if not ratios:
                    details.append(f"{label} -")
                    continue
                middle, spread = _judged(ratios)
                met += middle >= least
                details.append(f"{label} {middle:.2f}{spread}")
            lines.append(
                f"- {scenario} {mode}, BoltMQ >= {least}x {peer}: met in {met} of "
                f"{len(details)} ({', '.join(details)})"
            )
    floor = median_floor(floors)
    alone = [
        (r.topics, r.pass_index, r.p50_ms)
        for r in rows
        if is_one_sender(r) and r.p50_ms is not None and r.pass_index < len(floors)
    ]
    if floor is not None and alone:
        met, details = 0, []
        for topics in dict.fromkeys(t for t, _, _ in alone):
            each = [(at, p50) for t, at, p50 in alone if t == topics]
            ratios = [p50 / floors[at].p50_ms for at, p50 in each]
            middle, spread = _judged(ratios)
            met += middle <= FLOOR_TARGET
            p50 = statistics.median(p50 for _, p50 in each)
            details.append(f"{topics}t p50 {p50:.2f} ms = {middle:.2f}x{spread}")
        lines.append(
            f"- produce one-at-a-time, 1 producer, BoltMQ p50 <= {FLOOR_TARGET}x the "
            f"floor's {floor.p50_ms:.3f} ms: met in {met} of {len(details)} ({', '.join(details)})"
        )
    return lines
