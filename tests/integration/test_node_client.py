"""A client in another language: Node.js with nothing but the .proto files.

``clients/node/send_and_pull.js`` loads ``protos/`` at run time, finds the
master broker through the registry, sends one message and pulls it back, and
prints one JSON line. ``make test`` installs its npm dependencies first.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.integration.conftest import Cluster
from tests.integration.procs import REPO_ROOT

CLIENT_DIR = REPO_ROOT / "clients" / "node"
NODE = shutil.which("node")
RUN_TIMEOUT_S = 60.0

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (CLIENT_DIR / "node_modules").is_dir(),
        reason="clients/node/node_modules is missing (run `make node`)",
    ),
]


def run_node(*args: str) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, str(CLIENT_DIR / "send_and_pull.js"), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=CLIENT_DIR,
    )


def test_the_node_client_sends_and_pulls_back_a_message(cluster: Cluster) -> None:
    body = "héllo from node ✓"
    result = run_node(cluster.registry.address, "NodeTopic", body)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    answer = json.loads(lines[0])
    assert answer["body"] == body
    assert answer["tags"] == "node"
    assert answer["msgId"] and answer["msgId"] == answer["sentMsgId"]
    assert (answer["queueId"], int(answer["queueOffset"])) == (0, 0)

    again = json.loads(run_node(cluster.registry.address, "NodeTopic", "second").stdout)
    assert (again["body"], int(again["queueOffset"])) == ("second", 1)
    assert again["msgId"] == again["sentMsgId"] != answer["msgId"]


def test_the_node_client_reports_an_unreachable_registry_in_one_line() -> None:
    result = run_node("127.0.0.1:1", "NodeTopic", "x")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: GetClusterInfo"), result.stderr
