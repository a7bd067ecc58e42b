"""Running the official RocketMQ 5 clients (Python, Node.js) against a BoltMQ cluster.

The client (``rocketmq-python-client``, pinned in clients/rocketmq-python/requirements.lock)
lives in its own venv, ``.venv-rocketmq/`` (``make rocketmq-clients``): its generated
``apache.rocketmq.v2`` stubs must not meet the broker's in one process. The tests run the
scripts beside this module with that venv's Python; each prints one JSON line per event.
The Node.js client (``rocketmq-client-nodejs``, clients/rocketmq-node/) runs its script
there with node, the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
RMQ_PYTHON = REPO_ROOT / ".venv-rocketmq" / "bin" / "python"
SCRIPTS = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 120
NODE = shutil.which("node")
NODE_CLIENT = REPO_ROOT / "clients" / "rocketmq-node"

needs_node_client = pytest.mark.skipif(
    NODE is None or not (NODE_CLIENT / "node_modules" / "rocketmq-client-nodejs").is_dir(),
    reason="node or the official Node.js client is missing (make rocketmq-clients)",
)

needs_official_client = pytest.mark.skipif(
    not RMQ_PYTHON.exists(), reason="the official client's venv is missing (make rocketmq-clients)"
)


def client_log(home: Path) -> str:
    """What the official client logged (it logs to ``~/logs/rocketmq_python/``)."""
    path = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    return path.read_text() if path.exists() else ""


def run_node(script: str, *args: str) -> list[dict[str, Any]]:
    """Run ``clients/rocketmq-node/<script>`` with node; its events (JSON lines)."""
    with tempfile.TemporaryDirectory(prefix="rmq-node-") as home:  # the client logs there
        done = subprocess.run(
            [str(NODE), str(NODE_CLIENT / script), *args],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env={**os.environ, "HOME": home},
            cwd=NODE_CLIENT,
        )
    assert done.returncode == 0, f"{script} exited {done.returncode}: {done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def run_client(
    script: str, *args: str, credentials: tuple[str, str] = ("", ""), home: Path | None = None
) -> list[dict[str, Any]]:
    """Run ``script`` with the official client; its events (JSON lines), in order.

    ``home``: the client's home directory, where it writes its log (a temporary one,
    removed afterwards, when None).
    """
    with tempfile.TemporaryDirectory(prefix="rmq-client-") as scratch:
        env = {
            **os.environ,
            "RMQ_AK": credentials[0],
            "RMQ_SK": credentials[1],
            "HOME": str(home or scratch),
        }
        env.pop("PYTHONPATH", None)  # the client's venv sees none of BoltMQ
        done = subprocess.run(
            [str(RMQ_PYTHON), str(SCRIPTS / script), *args],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env=env,
            cwd=SCRIPTS,
        )
    assert done.returncode == 0, f"{script} exited {done.returncode}: {done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The events of one kind."""
    return [e for e in events if e["event"] == kind]


def consumptions(consumed: list[dict[str, Any]], message_id: str) -> list[tuple[int, str]]:
    """(attempt, result) of each push consumption of one message, in order."""
    return [(c["attempt"], c["result"]) for c in consumed if c["message_id"] == message_id]
