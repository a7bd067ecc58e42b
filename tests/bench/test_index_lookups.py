"""bench/index_lookups.py: its rounds find every key they look up, and bad flags are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import index_lookups


def test_the_run_prints_each_round_and_the_ratios(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    flags = ["--files", "2.5", "--slots", "256", "--entries", "1024", "--lookups", "20"]
    index_lookups.main([*flags, "--rounds", "2", "--burst", "5"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2,557 keys indexed in 0 s"
    assert [line.split()[0] for line in lines[1:5]] == ["normal", "random"] * 2
    assert all("MiB read for 20 lookups" in line for line in lines[1:5])
    assert lines[5] == "medians of 2 rounds each (random reads / normal advice):"
    assert [line.split()[0] for line in lines[6:]] == ["p50", "p90", "p99", "MiB"]
    assert list(tmp_path.iterdir()) == []  # its directory removed


def test_a_key_not_found_fails_the_round(tmp_path: Path) -> None:
    index_lookups.fill(tmp_path / "index", 256, 1024, 2_000)
    with pytest.raises(RuntimeError, match="not found"):
        index_lookups.one_round(tmp_path / "index", (256, 1024), 3_000, 50, 1, True, seed=1)


@pytest.mark.parametrize(
    "flags", [["--files", "1"], ["--lookups", "0"], ["--burst", "0"], ["--entries", "1"]]
)
def test_bad_flags_are_refused(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        index_lookups.main(flags)
    assert exited.value.code == 2
    assert "must be" in capsys.readouterr().err
