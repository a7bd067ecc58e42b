"""``boltmq dev --broker-groups N``: several broker groups behind one registry.

The command runs as a real process (as in test_dev.py); the tests read the
banner, check every group's processes, data directories and certificates,
send through the CLI with mutual TLS and a signed account, and refuse a bad
group count or ports that leave no room for the last group.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from boltmq.cli.cluster import COLUMNS
from tests.integration.procs import REPO_ROOT
from tests.integration.test_dev import READY_LINE, Dev, _cli


def cluster_rows(registry: str, tls: list[str], env: dict[str, str]) -> list[dict[str, str]]:
    """``boltmq admin cluster``'s table, a dict per row by column (no cell has a space)."""
    info = _cli("admin", "cluster", "--registry", registry, *tls, env=env)
    assert info.returncode == 0, info.stderr
    header, *lines = info.stdout.splitlines()
    columns = re.split(r"\s{2,}", header.strip())
    assert columns == list(COLUMNS)
    rows = [line.split() for line in lines]
    assert all(len(row) == len(columns) for row in rows), info.stdout
    return [dict(zip(columns, row, strict=True)) for row in rows]


def test_dev_runs_two_groups_with_tls_and_acl(tmp_path: Path) -> None:
    """Each group (a master and a replica) has its own ports, data directories and
    component certificates; both register with the one registry; ``admin cluster``
    shows every member; a signed CLI send over TLS reaches both groups."""
    dev = Dev(tmp_path / "data", "--broker-groups", "2", "--replicas", "1", "--tls", "--acl")
    try:
        registry = dev.wait_ready()["registry"]
        assert set(dev.groups) == {"broker-a", "broker-b"}
        a, b = dev.groups["broker-a"], dev.groups["broker-b"]
        assert a["broker"] != b["broker"] and a["store"] != b["store"]
        data = dev.data_dir
        assert (data / "store" / "abort").exists()  # broker-a keeps the one-group layout
        assert (data / "broker-b" / "store" / "abort").exists()
        assert (data / "broker-b" / "store-replica-1" / "abort").exists()
        for group in ("broker-a", "broker-b"):
            for role in ("broker", "ha", "store"):
                assert (data / "tls" / f"{group}-{role}.pem").exists()
        banner = "\n".join(dev.banner)
        assert f"data {data / 'broker-b' / 'store'}" in banner

        tls = [
            "--tls-ca",
            str(data / "tls" / "ca.pem"),
            "--tls-cert",
            str(data / "tls" / "client.pem"),
            "--tls-key",
            str(data / "tls" / "client.key"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BOLTMQ_")}
        env.update(
            PYTHONPATH=str(REPO_ROOT),
            BOLTMQ_ACCESS_KEY="dev-admin",
            BOLTMQ_SECRET_KEY=(data / "acl" / "admin.secret").read_text().strip(),
        )
        rows = cluster_rows(registry, tls, env)
        assert [(r["GROUP"], r["ROLE"], r["ID"]) for r in rows] == [
            ("broker-a", "master", "0"),
            ("broker-a", "replica", "1"),
            ("broker-b", "master", "0"),
            ("broker-b", "replica", "1"),
        ]
        assert [r["ADDRESS"] for r in rows if r["ROLE"] == "master"] == [a["broker"], b["broker"]]
        assert [r["STORE ROLE"] for r in rows] == ["ASYNC_MASTER", "SLAVE"] * 2
        assert {r["EPOCH"] for r in rows} == {"0"}
        assert [r["LAG B"] for r in rows if r["ROLE"] == "master"] == ["-", "-"]
        created = _cli("admin", "topic", "create", "Both", "--registry", registry, *tls, env=env)
        assert created.returncode == 0, created.stderr
        assert {line.split(":")[0] for line in created.stdout.splitlines()} == {
            "broker-a",
            "broker-b",
        }
        sent = _cli(
            "produce", "--registry", registry, *tls, "--topic", "Both", "--count", "16", env=env
        )
        assert sent.returncode == 0, sent.stderr
        deadline = time.monotonic() + 30
        while True:  # the replicas catch up: their lag, from both ends' CommitLogs, is 0
            rows = cluster_rows(registry, tls, env)
            ends = {(r["GROUP"], r["ROLE"]): int(r["COMMITLOG END"]) for r in rows}
            if all(r["LAG B"] == "0" for r in rows if r["ROLE"] == "replica"):
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.2)
        assert ends[("broker-a", "master")] + ends[("broker-b", "master")] > 0  # one batch
        for group in ("broker-a", "broker-b"):
            assert ends[(group, "replica")] == ends[(group, "master")]

        code, out, err = dev.stop(signal.SIGTERM)
        assert code == 0 and out.strip().splitlines()[-1] == "cluster stopped cleanly", err
        assert not (data / "broker-b" / "store" / "abort").exists()
    finally:
        dev.kill()


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (("--broker-groups", "0"), "'--broker-groups': 0 is not in the range 1<=x<=26"),
        (("--broker-groups", "27"), "'--broker-groups': 27 is not in the range 1<=x<=26"),
        (("--broker-groups", "x"), "'--broker-groups': 'x' is not a valid integer"),
        (
            ("--broker-groups", "3", "--broker-port", "65520"),
            "broker_port 65520 leaves no port for broker-c",
        ),
    ],
)
def test_dev_refuses_a_bad_group_count(tmp_path: Path, flags: tuple[str, ...], error: str) -> None:
    dev = Dev(tmp_path / "data", *flags)
    try:
        code, out, err = dev.stop(signal.SIGCONT)  # no signal that matters: it exits alone
    finally:
        dev.kill()
    assert code != 0 and READY_LINE not in out
    assert error in err and "Traceback" not in err, err
    assert not (tmp_path / "data" / "store").exists()
