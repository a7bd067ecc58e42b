"""The machine's speed at plain Python, as one number a benchmark prints beside its figures.

BoltMQ's client, broker and store are Python, so their limits are Python CPU;
Redis, NATS and RabbitMQ serve from C, Go and Erlang, and the benchmarks' peers
lose less when the same virtual machine runs Python slower. On this workplace's
VM the same code measured 3.3x apart on two days (a 256-message
``batch_records`` 0.65 us a message on 2026-11-27, 2.1-2.3 on 2026-11-28;
bench/history/side-by-side.md, "Python's speed moved"), while a run's load
average and the two-hop floor's latency hardly moved. A side-by-side run records
this probe at the start and end of each pass so its rows can be read against
another day's.

The probe: ``sum(range(1000))`` under :mod:`timeit`, the best of five repeats of
``PROBE_LOOPS`` (the best, not the mean: the least disturbed by the other work
of a shared machine). It allocates nothing that outlives a loop and touches no
file, lock or thread: it measures the interpreter and the core it runs on.
"""

from __future__ import annotations

import timeit

PROBE_STATEMENT = "sum(range(1000))"
PROBE_LOOPS = 2_000
PROBE_REPEATS = 5


def probe_us() -> float:
    """Microseconds one ``sum(range(1000))`` takes here now (best of five repeats)."""
    best = min(timeit.repeat(PROBE_STATEMENT, number=PROBE_LOOPS, repeat=PROBE_REPEATS))
    return best / PROBE_LOOPS * 1e6


def probe_text(probes: list[float]) -> str:
    """The sentence a report gives its probes ("" when there are none)."""
    if not probes:
        return ""
    low, high = min(probes), max(probes)
    spread = f"{low:.1f} us" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f} us"
    return (
        f"Python's speed here: `{PROBE_STATEMENT}` took {spread} (best of "
        f"{PROBE_REPEATS} x {PROBE_LOOPS:,}, at the start and end of each pass; "
        "bench/python_speed.py): BoltMQ's figures move with it more than the peers'. "
    )
