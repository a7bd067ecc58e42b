"""Rounds of two arms in one run: what the in-process A/B probes share.

``bench/index_roll.py``, ``bench/index_lookups.py`` and ``bench/point_reads.py`` each
alternate rounds of two ways of doing one thing and close with the medians of each
figure over its arm's rounds, the new way's as a ratio of the old way's (same machine,
same minutes: the ratio is the figure to read on this noisy VM).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of ``values`` sorted (nearest rank, 0.5 the median's)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def read_bytes() -> int:
    """Bytes this process has had read from the disk (``/proc/self/io``)."""
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("no read_bytes in /proc/self/io")


def print_medians(
    names: Sequence[str],
    new: tuple[str, list[list[float]]],
    old: tuple[str, list[list[float]]],
) -> None:
    """Each figure's median over the rounds of ``new`` and ``old`` (a label, one row of
    figures a round, in the order of ``names``), and their ratio."""
    (new_label, new_rows), (old_label, old_rows) = new, old
    medians = [
        [statistics.median(column) for column in zip(*rows, strict=True)]
        for rows in (new_rows, old_rows)
    ]
    print(f"medians of {len(new_rows)} rounds each ({new_label} / {old_label}):")
    width = max(len(name) for name in names)
    for name, now, before in zip(names, *medians, strict=True):
        ratio = now / before if before else float("nan")
        print(f"  {name:{width}}  {now:8.2f} / {before:8.2f} = {ratio:.2f}x")
