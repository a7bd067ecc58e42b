"""The Python-speed probe a side-by-side run prints beside its figures."""

from __future__ import annotations

from bench.python_speed import PROBE_STATEMENT, probe_text, probe_us


def test_the_probe_times_the_statement_in_microseconds() -> None:
    probes = [probe_us() for _ in range(3)]
    # sum(range(1000)) adds a thousand ints: microseconds, not nanoseconds or seconds.
    assert all(0.5 < probe < 5_000 for probe in probes), probes


def test_the_text_gives_the_spread_of_the_probes() -> None:
    assert probe_text([]) == ""
    one = probe_text([26.44, 26.41])
    assert f"`{PROBE_STATEMENT}` took 26.4 us (best of 5 x 2,000" in one
    spread = probe_text([28.2, 26.2, 27.0])
    assert "took 26.2-28.2 us" in spread
    assert spread.endswith(" ")  # the header's next sentence follows it
