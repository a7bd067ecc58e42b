"""The soak's judgement rules on made-up series, and its bad inputs (no processes)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bench.cli import bench as bench_command
from bench.soak_report import (
    Limits,
    ProcessSample,
    Sample,
    judge_handles,
    judge_memory,
    percentile_ms,
    slope_per_min,
)
from bench.soak_run import SoakError, SoakSpec, _Bitmap


def series(anon: list[float], fds: list[int]) -> list[Sample]:
    return [
        Sample(float(t + 1), 0, 0, None, None, None, {"store": ProcessSample(a + 100, a, f, 8)})
        for t, (a, f) in enumerate(zip(anon, fds, strict=True))
    ]


def test_slope_is_least_squares_per_minute() -> None:
    assert slope_per_min([0, 60, 120], [10, 11, 12]) == pytest.approx(1.0)
    assert slope_per_min([5], [1]) == 0.0


def test_memory_rule_ignores_warm_up_but_catches_late_growth() -> None:
    warm_then_flat = series([10, 20, 30, 40, 40, 40, 40, 40], [5] * 8)
    assert all(v.ok for v in judge_memory(warm_then_flat, Limits()))
    # 0.5 MiB per 1-second sample in the second half: 30 MiB/min
    leaking = series([40, 40, 40, 40, 40.5, 41, 41.5, 42], [5] * 8)
    (verdict,) = judge_memory(leaking, Limits())
    assert not verdict.ok and "+30.00 MiB/min" in verdict.detail


def test_handle_rule_allows_slack_and_catches_a_leak() -> None:
    assert all(
        v.ok for v in judge_handles(series([1] * 6, [9, 10, 10, 12, 11, 10]), Limits(fd_slack=2))
    )
    (verdict,) = judge_handles(series([1] * 6, [10, 10, 10, 11, 12, 13]), Limits(fd_slack=2))
    assert not verdict.ok and "second half max 13" in verdict.detail


def test_handle_rule_fails_when_a_process_vanished_early() -> None:
    samples = series([1] * 6, [10] * 6)
    for s in samples[2:]:  # t = 3..6: the whole second half
        s.processes.clear()
    (verdict,) = judge_handles(samples, Limits())
    assert not verdict.ok


def test_percentile_and_bitmap() -> None:
    assert percentile_ms([], 0.99) is None
    assert percentile_ms([1_000_000 * n for n in range(1, 101)], 0.99) == 100.0
    acked, received = _Bitmap(), _Bitmap()
    for n in (0, 7, 8, 9000):
        acked.add(n)
    assert received.add(7) and not received.add(7)
    assert received.missing_from(acked) == 3


@pytest.mark.parametrize(
    "spec, words",
    [
        (SoakSpec(seconds=10, sample_seconds=5), "each half"),
        (SoakSpec(size=4), "header"),
        (SoakSpec(producers=0), "at least 1"),
        (SoakSpec(rate=1, producers=4, batch=10), "below one batch"),
        (SoakSpec(limits=Limits(fd_slack=-1)), "negative"),
    ],
)
def test_bad_specs_are_named(spec: SoakSpec, words: str) -> None:
    with pytest.raises(SoakError, match=words):
        spec.check()


def test_cli_bad_input_is_one_line_and_non_zero(tmp_path) -> None:  # type: ignore[no-untyped-def]
    outcome = CliRunner().invoke(
        bench_command, ["soak", "--seconds", "10", "--sample-seconds", "5", "--out", str(tmp_path)]
    )
    assert outcome.exit_code == 1
    assert outcome.output.strip().startswith("Error: seconds must be at least")
    assert len(outcome.output.strip().splitlines()) == 1
    outcome = CliRunner().invoke(bench_command, ["soak", "--rate", "0"])
    assert outcome.exit_code == 2 and "--rate" in outcome.output
