"""The SDK imports none of the servers' code: an application that sends and consumes
loads the client, the kernel's client half and the wire codecs, nothing else of ours.

Checked in a fresh interpreter, since this test run itself has imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boltmq

REPO_ROOT = Path(boltmq.__file__).resolve().parents[1]
"""The tree under test (the probe must import this SDK, not an installed one)."""

SDK_MODULES = (
    "boltmq",
    "boltmq.producer",
    "boltmq.push_consumer",
    "boltmq.pull_consumer",
    "boltmq.transaction_producer",
)
SERVER_ONLY = (
    "services",
    "boltmq.cli",
    "boltmq.spark",
    "boltmq.kernel.runtime",
    "click",
    "rich",
    "opentelemetry.sdk",
    "prometheus_client",
    "pythonjsonlogger",
    "pyspark",
    # grpcio imports the top packages of grpc_health, grpc_reflection and grpc_tools
    # itself when they are installed; the servers' health and reflection services are
    # what the SDK must not load.
    "grpc_health.v1",
    "grpc_reflection.v1alpha",
)
"""Packages and modules only servers, the CLI or Spark jobs use (a name and its submodules)."""

LIST_MODULES = f"""
import json, sys
import {", ".join(SDK_MODULES)}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by_the_sdk() -> list[str]:
    """Every module a fresh interpreter has loaded after importing the SDK."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "BOLTMQ_"))  # nothing configures telemetry
    }
    done = subprocess.run(
        [sys.executable, "-c", LIST_MODULES],
        capture_output=True,
        check=True,
        cwd=REPO_ROOT,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        text=True,
    )
    modules: list[str] = json.loads(done.stdout)
    return modules


def test_the_probe_imports_the_sdk_under_test() -> None:
    probe = "import boltmq; print(boltmq.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        check=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        text=True,
    )
    assert Path(done.stdout.strip()).resolve() == Path(boltmq.__file__).resolve()


def is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_importing_the_sdk_loads_no_server_cli_or_spark_module() -> None:
    loaded = loaded_by_the_sdk()
    assert set(SDK_MODULES) <= set(loaded)  # the probe did import the SDK
    assert "boltmq.kernel.channels" in loaded  # the kernel's client half comes with it
    server_side = sorted(m for m in loaded if any(is_under(m, p) for p in SERVER_ONLY))
    assert server_side == [], f"the SDK imports server-side modules: {server_side}"


def test_a_package_is_recognised_with_its_submodules_only() -> None:
    assert is_under("services.broker.server", "services")
    assert is_under("opentelemetry.sdk", "opentelemetry.sdk")
    assert not is_under("opentelemetry.sdk_extension", "opentelemetry.sdk")
    assert not is_under("servicesx", "services")
