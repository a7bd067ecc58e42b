"""How every ``python -m bench`` prints its numbers.

One :class:`BenchResult` per scenario run: messages, seconds, msg/s, MB/s (of
bodies) and latency percentiles in milliseconds of whatever one timed call is
(a batch, a send, a send-to-receive trip). ``--json`` prints one JSON object
per line with the keys ``msgs_per_s``, ``mb_per_s``, ``p50_ms``, ``p99_ms``,
``p999_ms``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass


@dataclass
class BenchResult:
    """One scenario's numbers."""

    scenario: str
    messages: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    notes: str = ""


def result(
    name: str, count: int, seconds: float, body_bytes: int, samples_ns: list[int], notes: str = ""
) -> BenchResult:
    """A result from a count, a duration and per-call latency samples (ns)."""
    r = BenchResult(
        name,
        count,
        round(seconds, 3),
        round(count / seconds),
        round(count * body_bytes / seconds / 1e6, 1),
        notes=notes,
    )
    if samples_ns:
        ordered = sorted(samples_ns)

        def pick(q: float) -> float:
            return round(nearest_rank(ordered, q) / 1e6, 3)

        r.p50_ms, r.p99_ms, r.p999_ms = pick(0.50), pick(0.99), pick(0.999)
        r.max_ms = round(ordered[-1] / 1e6, 3)
    return r


def nearest_rank(ordered: Sequence[int], q: float) -> int:
    """The ``q`` quantile (0..1, nearest rank) of non-empty, sorted ``ordered``."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_threads(
    count: int, setup: Callable[[int], Callable[[], object]], calls: int
) -> tuple[float, list[int]]:
    """Run ``calls`` timed calls on each of ``count`` threads; (seconds, latency samples ns).

    ``setup(n)`` runs on thread ``n`` before the clock starts and returns the call
    to time. The clock starts once every thread is ready; the first error raised
    by a call is re-raised here.
    """
    samples: list[list[int]] = [[] for _ in range(count)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(count + 1)

    def worker(n: int) -> None:
        call = setup(n)
        out = samples[n]
        barrier.wait()
        try:
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                call()
                out.append(time.perf_counter_ns() - t0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return seconds, [s for per in samples for s in per]


def format_result(r: BenchResult) -> str:
    lat = (
        ""
        if r.p50_ms is None
        else (f"p50={r.p50_ms}ms p99={r.p99_ms}ms p999={r.p999_ms}ms max={r.max_ms}ms")
    )
    return (
        f"{r.scenario:<10} {r.messages:>9} msgs {r.seconds:>8.2f}s {r.msgs_per_s:>10,.0f} "
        f"msg/s {r.mb_per_s:>8.1f} MB/s  {lat}  {r.notes}"
    )


def to_json(r: BenchResult) -> str:
    return json.dumps(asdict(r), sort_keys=True)
