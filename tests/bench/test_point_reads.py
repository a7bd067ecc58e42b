"""bench/point_reads.py: its rounds read the records they look up both ways, and bad
flags are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import point_reads


def test_the_run_prints_each_round_and_the_ratios(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    point_reads.main(["--megabytes", "3", "--segment-mb", "1", "--lookups", "10", "--rounds", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("2,798 records written in ")
    assert lines[1].startswith("through the map ") and lines[2].startswith("through the file ")
    assert all("MiB read for 10 lookups;  offset by time" in line for line in lines[1:3])
    assert lines[3] == "medians of 1 rounds each (through the file / through the map):"
    assert [line.split()[0] for line in lines[4:]] == ["lookup", "lookup", "MiB", "by", "by"]
    assert list(tmp_path.iterdir()) == []  # its directory removed


@pytest.mark.parametrize("flag", ["--megabytes", "--lookups", "--rounds", "--segment-mb"])
def test_bad_flags_are_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        point_reads.main([flag, "0"])
    assert exited.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err
