"""The SDK installed alone: ``pip install <checkout>`` with no extras in a fresh venv.

An application that only sends and consumes must get a working client without the
server stack: no Spark, no code generator, none of the services' dependencies. The
venv is built as a user would from the files a clean clone holds (copied, without the
generated ``boltmq/v1``: the package build must generate the gRPC stubs itself), then a
script run by that venv's Python sends and pulls against a real cluster of processes
started from the development venv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from tests.integration.conftest import Cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_SOURCES = ("pyproject.toml", "setup.py", "README.md", "protos", "boltmq", "services")
"""What building the distribution reads; the generated stubs are left out."""

SERVER_ONLY = {
    "pyspark",
    "pyarrow",
    "grpcio-tools",
    "grpcio-health-checking",
    "grpcio-reflection",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-grpc",
    "opentelemetry-exporter-prometheus",
    "prometheus-client",
    "python-json-logger",
    "click",
    "rich",
}
"""Distributions of the ``server``, ``spark`` and ``dev`` extras that the SDK must not pull in."""

CLIENT = textwrap.dedent(
    """
    import json, sys
    from boltmq import Message, Producer, PullConsumer, PullStatus

    registry, topic = sys.argv[1], sys.argv[2]
    with Producer(registry, "alone-pg") as producer:
        sent = [producer.send(Message(topic=topic, body=b"m%d" % i)) for i in range(5)]
    bodies = []
    with PullConsumer(registry, "alone-cg") as puller:
        for queue in puller.queues(topic):
            result = puller.pull(queue, 0)
            if result.status is PullStatus.FOUND:
                bodies += [bytes(m.body).decode() for m in result.messages]
    print(json.dumps({"sent": len(sent), "bodies": sorted(bodies),
                      "server_modules": sorted(m for m in sys.modules
                                               if m.split(".")[0] in ("services", "click"))}))
    """
)


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only ``pip install <sources>``; its Python."""
    sources = tmp_path_factory.mktemp("sources")
    stubs = REPO_ROOT / "boltmq" / "v1"

    def ignored(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        return skipped | ({"v1"} if Path(directory) == stubs.parent else set())

    for name in PACKAGE_SOURCES:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, sources / name, ignore=ignored)
        else:
            shutil.copy2(origin, sources / name)
    assert not (sources / "boltmq" / "v1").exists()
    home = tmp_path_factory.mktemp("sdk-venv")
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(sources)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-4000:]
    return python


@pytest.mark.timeout(900)
def test_the_sdk_alone_installs_no_server_dependency(sdk_python: Path) -> None:
    listed = subprocess.run(
        [str(sdk_python), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {d["name"].lower().replace("_", "-") for d in json.loads(listed.stdout)}
    assert "boltmq" in names
    assert {"grpcio", "protobuf"} <= names
    assert not names & SERVER_ONLY, sorted(names & SERVER_ONLY)


@pytest.mark.timeout(900)
def test_the_sdk_alone_sends_and_pulls_against_a_cluster(
    sdk_python: Path, cluster: Cluster, tmp_path: Path
) -> None:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    ran = subprocess.run(
        [str(sdk_python), str(script), cluster.registry.address, "AloneTopic"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # not the checkout: the installed package is what is imported
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    outcome = json.loads(ran.stdout.splitlines()[-1])
    assert outcome["sent"] == 5
    assert outcome["bodies"] == [f"m{i}" for i in range(5)]
    assert outcome["server_modules"] == []


def test_the_checkout_is_not_on_the_sdk_venv_path(sdk_python: Path) -> None:
    """The import above is the installed copy, not this checkout's files."""
    where = subprocess.run(
        [str(sdk_python), "-c", "import boltmq; print(boltmq.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert str(REPO_ROOT) not in where.stdout
    assert "site-packages" in where.stdout
    assert sys.executable != str(sdk_python)
