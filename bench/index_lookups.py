"""Key lookups over released index pages: full files mapped for random reads, and not.

Run: .venv/bin/python -m bench.index_lookups [--files 2.2] [--lookups 200] [--burst 1]
     [--rounds 3] [--slots 5000000] [--entries 20000000]

It fills an index of the given geometry (the store's default: 420 MB files) with
``--files`` files' worth of unique keys, one a record, in a fresh directory beside the
checkout. Then, alternately, it opens the index as a store does (``random_reads``: its
files advised ``MADV_RANDOM``) and without, and looks up random keys, each checked to be
found, releasing every cached page of every file before each ``--burst`` of lookups (as
the index's page-cache window releases what is behind it, again every 10 s: 1 is a
lookup that comes after a sweep, a large burst many lookups between two sweeps). It
prints each round's percentiles and the bytes read from the disk (``/proc/self/io``),
and the medians as ratios.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from bench.arm_rounds import percentile, print_medians, read_bytes
from services.store.index_service import IndexService

FILL_CHUNK = 200_000
STORE_TS = 1_767_225_600_000


def key(n: int) -> str:
    return f"{n:032x}"


def fill(directory: Path, slots: int, entries: int, count: int) -> None:
    """``count`` records, record ``n`` with key ``key(n)`` at CommitLog offset ``100 (n+1)``."""
    index = IndexService(directory, slots, entries)
    try:
        index.load(True, 0)
        for first in range(0, count, FILL_CHUNK):
            numbers = range(first, min(count, first + FILL_CHUNK))
            index.build_index_run(
                "T", [(key(n),) for n in numbers], [100 * (n + 1) for n in numbers], STORE_TS
            )
    finally:
        index.close()


def one_round(
    directory: Path,
    geometry: tuple[int, int],
    count: int,
    lookups: int,
    burst: int,
    random_reads: bool,
    seed: int,
) -> tuple[list[float], int]:
    """(each lookup's ms, bytes read from the disk), every cached page released before
    each ``burst`` of lookups."""
    index = IndexService(directory, *geometry, random_reads=random_reads)
    try:
        index.load(True, 0)
        rng = random.Random(seed)
        took = []
        read = 0
        for done in range(lookups):
            if done % burst == 0:
                for f in index.files:
                    f.mapped.drop_cached(0, f.mapped.file_size)
                before = read_bytes()
            n = rng.randrange(count)
            started = time.perf_counter()
            found = index.query("T", key(n), 32, 0, 1 << 62)
            took.append(1e3 * (time.perf_counter() - started))
            if 100 * (n + 1) not in found:
                raise RuntimeError(f"key {key(n)} not found")
            if done % burst == burst - 1 or done == lookups - 1:
                read += read_bytes() - before
        return took, read
    finally:
        index.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=float, default=2.2, help="index files' worth of keys")
    parser.add_argument("--lookups", type=int, default=200, help="lookups a round")
    parser.add_argument("--burst", type=int, default=1, help="lookups between two releases")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    parser.add_argument("--slots", type=int, default=5_000_000)
    parser.add_argument("--entries", type=int, default=20_000_000)
    args = parser.parse_args(argv)
    count = int(args.files * (args.entries - 1))
    if args.files <= 1 or min(args.lookups, args.burst, args.rounds, args.slots) < 1:
        parser.error("--files must be over 1; --lookups, --burst, --rounds, --slots at least 1")
    if args.entries < 2:
        parser.error("--entries must be at least 2")
    root = Path(tempfile.mkdtemp(prefix="boltmq-index-lookups-", dir=Path.cwd()))
    kinds: dict[bool, list[list[float]]] = {True: [], False: []}
    try:
        started = time.perf_counter()
        fill(root / "index", args.slots, args.entries, count)
        print(f"{count:,} keys indexed in {time.perf_counter() - started:.0f} s")
        for n in range(2 * args.rounds):
            random_reads = n % 2 == 1
            took, read = one_round(
                root / "index",
                (args.slots, args.entries),
                count,
                args.lookups,
                args.burst,
                random_reads,
                n,
            )
            figures = [percentile(took, p) for p in (0.5, 0.9, 0.99)] + [read / 2**20]
            kinds[random_reads].append(figures)
            print(
                f"{'random reads' if random_reads else 'normal advice':13}  p50 {figures[0]:7.2f}"
                f"  p90 {figures[1]:7.2f}  p99 {figures[2]:7.2f} ms;"
                f"  {figures[3]:8.1f} MiB read for {args.lookups} lookups"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_medians(
        ("p50 ms", "p90 ms", "p99 ms", "MiB read"),
        ("random reads", kinds[True]),
        ("normal advice", kinds[False]),
    )


if __name__ == "__main__":
    main()
