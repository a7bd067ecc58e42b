"""``python -m bench.compare`` in its quickest form, against real servers.

BoltMQ (``boltmq dev``) and Redis (``redis-server``) always; NATS JetStream
only where ``nats-server`` is installed (``make test`` does not need it). The
checks are on what the table is made of: real message counts, rates computed
from them, ratios computed from the rates; never on how fast anything was.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.compare import report
from bench.compare.run import compare, main, section
from bench.compare.workload import Workload

pytest.importorskip("redis", reason="redis-py is in the bench extra")
pytest.importorskip("matplotlib", reason="matplotlib is in the bench extra")
if shutil.which("redis-server") is None:
    pytest.skip(
        "redis-server is not installed (apt-get install -y redis-server)", allow_module_level=True
    )

CONSUME = 1500
EXISTING = (
    "# Benchmark results\n\n## Earlier\nkept above\n\n"
    "## Side by side\nstale table\n\n## Later\nkept below\n"
)
ROW = re.compile(
    r"^\| (?P<scenario>[a-z+]+) \| (?P<mode>[a-z-]+) \| (?P<producers>\d+) \| "
    r"(?P<topics>\d+) \| (?P<system>[^|]+) \| (?P<messages>[\d,]+) \| "
    r"(?P<rate>[\d,]+) \| [\d.]+ \| [^|]+ \| [^|]+ \| (?P<ratio>[\d.]+|-) \|$"
)

FLOOR = re.compile(r"two-hop streamed floor.*: ([\d,]+) msg/s, p50 ([\d.]+) ms, p99 [\d.]+ ms\.")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("compare")
    (out / "RESULTS.md").write_text(EXISTING)
    outcome = CliRunner().invoke(
        main,
        [
            "--quick",
            "--seconds",
            "0.5",
            "--consume-messages",
            str(CONSUME),
            "--topics",
            "1",
            "--producers",
            "1",
            "--system",
            "boltmq",
            "--system",
            "redis",
            "--results",
            str(out / "RESULTS.md"),
            "--charts-dir",
            str(out),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    return out, (out / "RESULTS.md").read_text()


def rows_of(text: str) -> list[dict[str, str]]:
    return [m.groupdict() for line in text.splitlines() if (m := ROW.match(line))]


def test_every_scenario_has_a_row_per_system_with_real_counts(run: tuple[Path, str]) -> None:
    rows = rows_of(run[1])
    expected = {
        ("produce", "batched"),
        ("produce", "one-at-a-time"),
        ("produce", "concurrent-sends"),
        ("consume", "batched"),
        ("produce+consume", "batched"),
    }
    for system in ("BoltMQ", "Redis Streams"):
        mine = [r for r in rows if r["system"].strip() == system]
        assert {(r["scenario"], r["mode"]) for r in mine} == expected
        for r in mine:
            assert int(r["messages"].replace(",", "")) > 0
            assert int(r["rate"].replace(",", "")) > 0
        (consumed,) = [r for r in mine if r["scenario"] == "consume"]
        assert int(consumed["messages"].replace(",", "")) >= CONSUME


def test_ratios_are_boltmq_rate_over_the_row_rate(run: tuple[Path, str]) -> None:
    rows = rows_of(run[1])
    for row in rows:
        same = [
            r
            for r in rows
            if r["system"].strip() == "BoltMQ"
            and (r["scenario"], r["mode"]) == (row["scenario"], row["mode"])
        ]
        boltmq_rate = int(same[0]["rate"].replace(",", ""))
        expected = boltmq_rate / int(row["rate"].replace(",", ""))
        # rates are printed rounded to whole msg/s, ratios to 2 decimals
        assert float(row["ratio"]) == pytest.approx(expected, rel=0.02, abs=0.011)


def test_only_the_side_by_side_section_is_replaced(run: tuple[Path, str]) -> None:
    out, text = run
    assert "stale table" not in text
    assert (
        text.index("kept above")
        < text.index("## Side by side")
        < text.index("## Later")
        < text.index("kept below")
    )
    assert "appendfsync everysec" in text and "ASYNC_FLUSH" in text
    charts = {p.name for p in out.glob("compare-*.png")}
    drawn = {(r["scenario"].replace("+", "-"), r["mode"]) for r in rows_of(text)}
    assert charts == {f"compare-{scenario}-{mode}.png" for scenario, mode in drawn}
    assert "compare-produce-batched.png" in charts


def test_the_floor_of_the_same_run_and_every_target_are_listed(run: tuple[Path, str]) -> None:
    text = run[1]
    floor = FLOOR.search(text)
    assert floor is not None, text
    assert int(floor.group(1).replace(",", "")) > 0
    targets = text[text.index("Targets:") :].splitlines()[1:6]
    assert [line.split(":")[0] for line in targets] == [
        "- produce concurrent-sends, BoltMQ >= 1.5x Redis Streams",
        "- produce batched, BoltMQ >= 1.2x Redis Streams",
        "- consume batched, BoltMQ >= 1.5x Redis Streams",
        f"- produce one-at-a-time, 1 producer, BoltMQ p50 <= 1.2x the floor's {floor.group(2)} ms",
        "",
    ]


def test_section_is_appended_when_absent() -> None:
    text = report.replace_section("# Results\n\n## Other\nx\n", "## Side by side\nT")
    assert text == "# Results\n\n## Other\nx\n\n## Side by side\nT\n"


@pytest.mark.skipif(
    shutil.which("nats-server") is None,
    reason="nats-server is not installed (apt-get install -y nats-server); "
    "make test does not need it",
)
def test_nats_runs_the_same_workload() -> None:
    result = compare(
        ["nats"],
        Workload(seconds=0.5, consume_messages=CONSUME, topic_counts=(2,), producer_counts=(1,)),
    )
    assert not result.skipped
    assert {r.system for r in result.rows} == {"NATS JetStream"}
    assert len(result.rows) == 5 and all(r.messages > 0 for r in result.rows)
    (consumed,) = [r for r in result.rows if r.scenario == "consume"]
    assert consumed.messages >= CONSUME


def test_a_missing_server_is_skipped_with_the_apt_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda program: None)
    result = compare(["nats"], Workload(seconds=0.1, topic_counts=(1,), producer_counts=(1,)))
    assert result.rows == []
    assert "apt-get install -y nats-server" in result.skipped["NATS JetStream"]


def test_passes_alternate_the_systems_and_each_has_its_floor() -> None:
    order: list[tuple[str, str]] = []
    work = Workload(seconds=0.3, consume_messages=CONSUME, topic_counts=(1,), producer_counts=(1,))
    result = compare(
        ["boltmq", "redis"], work, progress=lambda r: order.append((r.system, r.scenario)), passes=2
    )
    assert not result.skipped
    systems = [system for system, scenario in order if scenario == "consume"]
    assert systems == ["BoltMQ", "Redis Streams", "BoltMQ", "Redis Streams"]
    assert sorted({(r.system, r.pass_index) for r in result.rows}) == [
        ("BoltMQ", 0),
        ("BoltMQ", 1),
        ("Redis Streams", 0),
        ("Redis Streams", 1),
    ]
    assert len(result.floors) == 2 and all(f.messages > 0 for f in result.floors)
    assert len(result.probes) == 4 and all(probe > 0 for probe in result.probes)
    text = section(result, "python -m bench.compare --passes 2")
    assert "Every system ran 2 times, alternating" in text
    assert "Python's speed here: `sum(range(1000))` took " in text
    assert "p50 of each pass" in text
    table = [line for line in text.splitlines() if line.startswith("| produce | batched |")]
    each_pass = [line.rstrip(" |").rsplit("| ", 1)[1].split(", ") for line in table]
    assert len(table) == 2 and all(len(rates) == 2 for rates in each_pass), table


def test_boltmq_runs_colocated_when_asked() -> None:
    work = Workload(seconds=0.3, consume_messages=CONSUME, topic_counts=(1,), producer_counts=(1,))
    result = compare(["boltmq"], work, colocate=True)
    assert not result.skipped
    assert {r.system for r in result.rows} == {"BoltMQ"}
    assert len(result.rows) == 5 and all(r.messages > 0 for r in result.rows)
    assert "the broker serving its store in one process" in result.durability["BoltMQ"]
