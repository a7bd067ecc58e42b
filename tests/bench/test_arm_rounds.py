"""bench/arm_rounds.py: the percentile, the disk-read counter and the closing medians."""

from __future__ import annotations

import pytest

from bench.arm_rounds import percentile, print_medians, read_bytes


def test_the_percentile_is_the_nearest_rank() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [percentile(values, f) for f in (0.0, 0.5, 0.99, 1.0)] == [1.0, 3.0, 5.0, 5.0]


def test_the_disk_read_counter_is_this_process_s() -> None:
    before = read_bytes()
    assert before >= 0 and read_bytes() >= before


def test_the_medians_of_each_arm_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    print_medians(
        ("a ms", "b MiB"),
        ("new", [[1.0, 0.0], [3.0, 4.0], [2.0, 2.0]]),
        ("old", [[4.0, 0.0], [4.0, 0.0], [8.0, 0.0]]),
    )
    assert capsys.readouterr().out.splitlines() == [
        "medians of 3 rounds each (new / old):",
        "  a ms       2.00 /     4.00 = 0.50x",
        "  b MiB      2.00 /     0.00 = nanx",
    ]
