"""The Python-speed probe a side-by-side run prints beside its figures."""

from __future__ import annotations

import math

import pytest

from bench import python_speed
from bench.python_speed import PROBE_LOOPS, PROBE_REPEATS, PROBE_STATEMENT, probe_text, probe_us


def test_the_probe_is_the_best_repeat_in_microseconds_a_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, int, int]] = []

    def repeat(statement: str, number: int, repeat: int) -> list[float]:
        asked.append((statement, number, repeat))
        return [0.09, 0.054, 0.07, 0.06, 0.08]  # seconds for `number` loops, per repeat

    monkeypatch.setattr(python_speed.timeit, "repeat", repeat)
    assert probe_us() == pytest.approx(0.054 / PROBE_LOOPS * 1e6)
    assert asked == [(PROBE_STATEMENT, PROBE_LOOPS, PROBE_REPEATS)]


def test_the_real_probe_runs_the_statement() -> None:
    probe = probe_us()
    assert probe > 0 and math.isfinite(probe)


def test_the_text_gives_the_spread_of_the_probes() -> None:
    assert probe_text([]) == ""
    one = probe_text([26.44, 26.41])
    assert f"`{PROBE_STATEMENT}` took 26.4 us (best of 5 x 2,000" in one
    spread = probe_text([28.2, 26.2, 27.0])
    assert "took 26.2-28.2 us" in spread
    assert spread.endswith(" ")  # the header's next sentence follows it
