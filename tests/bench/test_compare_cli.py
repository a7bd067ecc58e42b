"""``python -m bench.compare``'s bad inputs and failures: one clear line, non-zero exit."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bench.compare import run
from bench.compare.peer import PeerFailed


@pytest.mark.parametrize(
    "args, words",
    [
        (["--system", "kafka"], "'kafka' is not one of"),
        (["--seconds", "0"], "--seconds"),
        (["--topics", "0"], "--topics"),
        (["--producers", "65"], "--producers"),
        (["--senders", "0"], "--senders"),
        (["--consume-messages", "-1"], "--consume-messages"),
        (["--passes", "0"], "--passes"),
        (["--passes", "10"], "--passes"),
    ],
)
def test_bad_options_are_refused(args: list[str], words: str) -> None:
    outcome = CliRunner().invoke(run.main, args)
    assert outcome.exit_code == 2 and words in outcome.output


def test_a_failing_system_is_one_line_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    def broken(*args: object, **kwargs: object) -> None:
        raise PeerFailed("redis-server exited 1")

    monkeypatch.setattr(run, "compare", broken)
    results = tmp_path / "RESULTS.md"
    outcome = CliRunner().invoke(
        run.main, ["--quick", "--results", str(results), "--charts-dir", str(tmp_path)]
    )
    assert outcome.exit_code == 1
    assert outcome.output.strip() == "Error: redis-server exited 1"
    assert not results.exists()
