"""``python -m bench.relay_floor``: the bare two-hop path, unary or streamed; its bad options."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.bench import run_bench

LINE = re.compile(
    r"^(push|pull) batch (\d+) x (\d+) B, (\d+) producer\(s\), (unary|stream) "
    r"calls: ([\d,]+) msg/s, [\d.]+ MB/s, p50 [\d.]+ ms, p99 [\d.]+ ms per call; "
    r"CPU per message: relay [\d.]+ us, sink [\d.]+ us, client [\d.]+ us$"
)


def run_floor(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.relay_floor", *args, timeout_s=120)


@pytest.mark.parametrize("call", ["unary", "stream"])
@pytest.mark.parametrize("direction", ["push", "pull"])
def test_each_call_kind_moves_messages_and_prints_rate_percentiles_and_cpu(
    call: str, direction: str
) -> None:
    done = run_floor(
        "--call",
        call,
        "--direction",
        direction,
        "--batch",
        "4",
        "--producers",
        "2",
        "--seconds",
        "0.3",
    )
    assert done.returncode == 0, done.stderr
    match = LINE.match(done.stdout.strip())
    assert match is not None, done.stdout
    assert match.group(1, 2, 3, 4, 5) == (direction, "4", "1024", "2", call)
    assert int(match.group(6).replace(",", "")) > 0


@pytest.mark.parametrize(
    "args, words",
    [
        (["--call", "bidi"], "--call"),
        (["--batch", "0"], "--batch"),
        (["--size", "4"], "--size"),
        (["--producers", "0"], "--producers"),
    ],
)
def test_bad_options_are_refused(args: list[str], words: str) -> None:
    done = run_floor(*args)
    assert done.returncode == 2 and words in done.stderr
