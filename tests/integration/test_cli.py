"""The ``boltmq`` command against a real cluster, run as a user runs it.

Every command is ``python -m boltmq.cli ...`` in its own process; assertions
are on what it prints and how it exits. A user's mistake must be exactly one
line on stderr (``Error: ...``) and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.integration.conftest import Cluster
from tests.integration.procs import REPO_ROOT

COMMAND_TIMEOUT_S = 60.0
"""A bound on one command, far above what any of them needs."""
UNREACHABLE = "127.0.0.1:1"
"""A registry address nothing listens on."""

Run = Callable[..., subprocess.CompletedProcess[str]]


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    env.pop("BOLTMQ_REGISTRY", None)
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
    )


@pytest.fixture
def boltmq(cluster: Cluster) -> Run:
    """``boltmq("admin", "cluster")``: runs against the cluster, must succeed."""

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        result = run_cli(*args, "--registry", cluster.registry.address, stdin=stdin)
        assert result.returncode == 0, f"{args} failed: {result.stderr}"
        return result

    return run


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single ``Error:`` line of a failed command (asserting there is just one)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert lines[0].startswith("Error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# ===================================================================== messages
def test_produce_with_tags_and_keys_then_consume_prints_them(boltmq: Run) -> None:
    hello = boltmq(
        "produce",
        "--topic",
        "greetings",
        "--body",
        "hello",
        "--tags",
        "A",
        "--keys",
        "k1 k2",
        "--property",
        "lang=en",
    ).stdout
    world = boltmq("produce", "--topic", "greetings", "--body", "world", "--tags", "B").stdout
    hello_id, hello_at = _sent(hello)
    world_id, world_at = _sent(world)

    printed = boltmq("consume", "--topic", "greetings", "--count", "2").stdout.splitlines()
    assert sorted(printed) == sorted(
        [
            f"{hello_id} greetings/{hello_at} tags=A keys=k1 k2 body=b'hello'",
            f"{world_id} greetings/{world_at} tags=B keys=- body=b'world'",
        ]
    )

    only_b = boltmq(
        "consume", "--topic", "greetings", "--group", "tag-b", "--subscription", "B", "--count", "1"
    ).stdout.splitlines()
    assert only_b == [f"{world_id} greetings/{world_at} tags=B keys=- body=b'world'"]

    lines = boltmq("produce", "--topic", "greetings", stdin="one\ntwo\nthree\n").stdout
    assert len([line for line in lines.splitlines() if line.startswith("SEND_OK ")]) == 3
    rest = boltmq("consume", "--topic", "greetings", "--count", "3").stdout
    assert sorted(re.findall(r"body=b'(\w+)'", rest)) == ["one", "three", "two"]


def _sent(produce_output: str) -> tuple[str, str]:
    """(msg id, "queue@offset") from ``SEND_OK <id> <topic>@<broker>/<queue> offset <n>``."""
    found = re.fullmatch(
        r"SEND_OK (\w+) [\w-]+@broker-a/(\d+) offset (\d+)", produce_output.strip()
    )
    assert found, produce_output
    return found.group(1), f"{found.group(2)}@{found.group(3)}"


def test_produce_count_then_consume_count_quiet_and_the_lag_is_zero(boltmq: Run) -> None:
    sent = boltmq("produce", "--topic", "load", "--count", "2000", "--size", "100").stdout
    assert sent.startswith("sent 2000 messages in ")
    status = boltmq("admin", "topic", "status", "load").stdout
    assert sum(int(m) for m in re.findall(r"max\s+(\d+)", status)) == 2000

    consumed = boltmq(
        "consume", "--topic", "load", "--group", "loaders", "--count", "2000", "--quiet"
    )
    assert consumed.stdout.startswith("consumed 2000 messages in ")
    assert "body=" not in consumed.stdout

    progress = boltmq("admin", "group", "progress", "loaders").stdout.splitlines()
    rows = [line for line in progress if " load/" in line]
    assert len(rows) == 4 and progress[-1] == "total lag 0"
    for row in rows:
        broker, consumer, lag = (
            int(x)
            for x in re.search(r"broker\s+(\d+) consumer\s+(-?\d+) lag\s+(\d+)", row).groups()
        )  # type: ignore
        assert (broker, lag) == (consumer, 0), row
    assert any(
        line.split()[1] == "loaders"
        for line in boltmq("admin", "group", "list").stdout.splitlines()
    )


# ===================================================================== admin
def test_admin_topic_create_update_list_route_status_delete(boltmq: Run, cluster: Cluster) -> None:
    created = boltmq("admin", "topic", "create", "news", "--queues", "3").stdout
    assert created.strip() == "broker-a: news queues 3/3 perm RW"
    listed = boltmq("admin", "topic", "list").stdout
    assert re.search(r"broker-a\s+news\s+queues\s+3 perm RW", listed)
    route = boltmq("admin", "topic", "route", "news").stdout.splitlines()
    assert route == [
        "queues  broker-a: write 3 read 3 perm RW",
        f"broker  DefaultCluster/broker-a: 0={cluster.broker.address}",
    ]
    status = boltmq("admin", "topic", "status", "news").stdout.splitlines()
    assert [line.split()[1] for line in status] == ["news/0", "news/1", "news/2"]

    updated = boltmq("admin", "topic", "update", "news", "--queues", "5", "--perm", "4").stdout
    assert updated.strip() == "broker-a: news queues 5/5 perm R-"
    route = boltmq("admin", "topic", "route", "news").stdout.splitlines()
    assert route[0] == "queues  broker-a: write 5 read 5 perm R-"
    # The permission is enforced: a read-only topic refuses a send.
    refused = run_cli(
        "produce", "--registry", cluster.registry.address, "--topic", "news", "--body", "x"
    )
    one_line_error(refused, "news")

    assert boltmq("admin", "topic", "delete", "news").stdout.strip() == "broker-a: news deleted"
    assert not re.search(r"\snews\s", boltmq("admin", "topic", "list").stdout)
    gone = run_cli("admin", "topic", "route", "news", "--registry", cluster.registry.address)
    one_line_error(gone, "news")


def test_admin_cluster_and_message_lookups(boltmq: Run, cluster: Cluster) -> None:
    header, row = boltmq("admin", "cluster").stdout.splitlines()
    assert header.split()[:5] == ["CLUSTER", "GROUP", "ROLE", "ID", "ADDRESS"]
    cells = row.split()
    assert cells[:5] == ["DefaultCluster", "broker-a", "master", "0", cluster.broker.address]
    assert cells[5] in ("ASYNC_MASTER", "SYNC_MASTER") and cells[6] == "0"  # store role, epoch
    assert cells[8] == "-"  # a master has no lag of its own

    sent = boltmq("produce", "--topic", "lookups", "--body", "find-me", "--keys", "order-7").stdout
    msg_id = sent.split()[1]
    by_id = boltmq("admin", "message", "id", msg_id).stdout
    assert by_id.startswith(f"broker-a: {msg_id} lookups/") and "body=b'find-me'" in by_id
    assert "keys=order-7" in by_id
    by_key = boltmq("admin", "message", "key", "lookups", "order-7").stdout
    assert by_key == by_id
    commitlog_offset = re.search(r"commitlog (\d+)", by_id).group(1)  # type: ignore[union-attr]
    assert boltmq("admin", "message", "offset", commitlog_offset).stdout == by_id


# ===================================================================== mistakes
def test_every_user_mistake_is_one_line_and_a_non_zero_exit(cluster: Cluster) -> None:
    registry = ("--registry", cluster.registry.address)
    taken_port = str(cluster.registry.port)
    known = run_cli("produce", *registry, "--topic", "known", "--body", "x", "--tags", "A")
    # The id of a message that was never written: this store's prefix, an offset past the end.
    absent_id = known.stdout.split()[1][:-16] + f"{10**12:016X}"
    mistakes: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
        (("admin", "topic", "route", "no-such-topic", *registry), ("no-such-topic",)),
        (("admin", "topic", "create", "bad/name", *registry), ("bad/name",)),
        (("admin", "topic", "status", "no-such-topic", *registry), ("no-such-topic",)),
        (
            ("produce", "--registry", UNREACHABLE, "--topic", "t", "--body", "x"),
            ("no registry reachable", UNREACHABLE),
        ),
        (
            ("consume", "--registry", UNREACHABLE, "--topic", "t", "--count", "1"),
            ("no registry reachable",),
        ),
        (("admin", "cluster", "--registry", UNREACHABLE), ("no registry reachable",)),
        (("admin", "cluster", "--registry", "not-an-address"), ("not-an-address",)),
        (
            ("produce", *registry, "--topic", "t", "--body", "x", "--property", "novalue"),
            ("--property", "novalue"),
        ),
        (("produce", *registry, "--topic", "bad topic", "--body", "x"), ("bad topic",)),
        (("consume", *registry, "--topic", "no-such-topic", "--count", "1"), ("no-such-topic",)),
        (
            ("consume", *registry, "--topic", "known", "--subscription", "A ||", "--count", "1"),
            ("subscription",),
        ),
        (("admin", "message", "id", absent_id, *registry), ("no message", absent_id)),
        (
            ("admin", "message", "id", "not-hex", *registry),
            ("no message with unique id not-hex", "not an offset id"),
        ),
        (("admin", "message", "key", "known", "absent-key", *registry), ("absent-key",)),
        (("serve", "registry", "--port", taken_port), ("cannot listen", taken_port)),
    ]
    for args, fragments in mistakes:
        one_line_error(run_cli(*args), *fragments)
