"""An index file's roll and the puts after it, with the next file made ahead and without.

Run: .venv/bin/python -m bench.index_roll [--rounds 6] [--slots 5000000] [--entries 20000000]

Each round makes an IndexService of the given geometry (the store's default: 420 MB
files) in a fresh directory beside the checkout, its files mapped for random reads as a
store's are (``random_reads``), starts its first file, then times the
roll to a second file and the puts after it (random keys, one a put, as the SDK's unique
ids): alternately with the next file made ahead in the background
(services/store/index_spare.py) and made by the roll itself. It prints each round and the
medians, the made-ahead figures as ratios of the others.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from bench.arm_rounds import print_medians
from services.store.index_service import IndexService

FIRST_PUTS = 50
LATER_PUTS = 2_000


def one_round(directory: Path, slots: int, entries: int, ahead: bool, seed: int) -> list[float]:
    """(roll, first puts, later puts) in ms, for one service in ``directory``."""
    index = IndexService(directory, slots, entries, make_ahead=ahead, random_reads=True)
    try:
        index.load(True, 0)
        index.build_index("T", ["first"], 100, 1_000)  # the first file
        spare = None
        if index.spare is not None:
            index.spare.prepare()  # as when the first file is half full
            index.spare.wait()
            spare = os.stat(index.spare.path).st_ino
        rng = random.Random(seed)
        started = time.perf_counter()
        index.files[-1].index_count = entries  # full: the next put rolls
        index.build_index("T", [f"{rng.getrandbits(64):032x}"], 200, 2_000)
        rolled = time.perf_counter()
        for n in range(FIRST_PUTS):
            index.build_index("T", [f"{rng.getrandbits(64):032x}"], 300 + n, 3_000)
        first = time.perf_counter()
        for n in range(LATER_PUTS):
            index.build_index("T", [f"{rng.getrandbits(64):032x}"], 400 + n, 4_000)
        later = time.perf_counter()
        assert len(index.files) == 2
        if spare is not None and os.stat(index.files[-1].path).st_ino != spare:
            raise RuntimeError("the roll did not take the file made ahead")
        return [1e3 * (rolled - started), 1e3 * (first - rolled), 1e3 * (later - first)]
    finally:
        index.destroy_all()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each kind")
    parser.add_argument("--slots", type=int, default=5_000_000)
    parser.add_argument("--entries", type=int, default=20_000_000)
    args = parser.parse_args(argv)
    least = FIRST_PUTS + LATER_PUTS + 2  # the puts after the roll fit the new file
    if args.rounds < 1 or args.slots < 1 or args.entries < least:
        parser.error(f"--rounds and --slots must be at least 1, --entries at least {least:,}")
    root = Path(tempfile.mkdtemp(prefix="boltmq-index-roll-", dir=Path.cwd()))
    kinds: dict[str, list[list[float]]] = {"made by the roll": [], "made ahead": []}
    try:
        for n in range(2 * args.rounds):
            ahead = n % 2 == 1
            figures = one_round(root / str(n), args.slots, args.entries, ahead, n)
            kinds["made ahead" if ahead else "made by the roll"].append(figures)
            print(
                f"{'made ahead' if ahead else 'made by the roll':16}  roll {figures[0]:6.2f} ms"
                f"  first {FIRST_PUTS} puts {figures[1]:6.2f} ms"
                f"  next {LATER_PUTS:,} puts {figures[2]:6.2f} ms"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_medians(
        ("roll ms", f"first {FIRST_PUTS} puts ms", f"next {LATER_PUTS:,} puts ms"),
        ("made ahead", kinds["made ahead"]),
        ("made by the roll", kinds["made by the roll"]),
    )


if __name__ == "__main__":
    main()
