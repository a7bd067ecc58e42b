"""bench/index_roll.py: its rounds measure what they name, and bad flags are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import index_roll


def test_a_round_of_each_kind_times_a_roll_that_took_its_file_as_named(tmp_path: Path) -> None:
    """A made-ahead round checks itself that the roll renamed the spare (same inode)."""
    for ahead in (False, True):
        figures = index_roll.one_round(tmp_path / str(ahead), 1024, 4096, ahead, seed=1)
        assert len(figures) == 3 and all(ms > 0 for ms in figures)
        assert not (tmp_path / str(ahead)).exists() or not any((tmp_path / str(ahead)).iterdir())


def test_the_run_prints_each_round_and_the_ratios(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    index_roll.main(["--rounds", "2", "--slots", "1024", "--entries", "4096"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["made", "made", "made", "made"]
    assert lines[4] == "medians of 2 rounds each (made ahead / made by the roll):"
    assert [line.split()[0] for line in lines[5:]] == ["roll", "first", "next"]
    assert all(line.endswith("x") for line in lines[5:])
    assert list(tmp_path.iterdir()) == []  # its directory removed


@pytest.mark.parametrize("flags", [["--rounds", "0"], ["--slots", "0"], ["--entries", "2051"]])
def test_bad_flags_are_refused(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        index_roll.main(flags)
    assert exited.value.code == 2
    assert "must be at least" in capsys.readouterr().err
