"""The Dockerfile and .dockerignore: read as text, then its build steps executed without Docker.

The test machines have no Docker engine. The first tests keep the Dockerfile
in step with what it packages: the generator versions of requirements.lock, the
Makefile's protoc run, the console script it starts, and a build context that
holds every file it copies.

The rest execute the builder stage under a temporary root standing for the
image's ``/``: its COPY lines (parsed, not listed here) copy the build context
as ``.dockerignore`` leaves it, its RUN lines run as written with this venv's
``python`` (the generators' ``pip install`` is skipped: the venv's versions
are checked against the pins instead), and its ``pip wheel`` builds the BoltMQ
wheel with ``--no-deps --no-build-isolation``: no network, so no dependency
wheel is built or fetched. The wheel is installed (``pip install --no-deps
--target``) for a clean interpreter that sees this venv's dependencies but not
its editable BoltMQ, and the final stage's ENTRYPOINT starts a registry from
it. Not executed: the ``python:3.11-slim`` base image, the ``groupadd`` /
``useradd`` layer, and installing the dependencies' wheels from PyPI.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from boltmq.cli.dev.launcher import START_TIMEOUT_S, STOP_TIMEOUT_S
from boltmq.cli.main import SERVICE_MODULES
from boltmq.kernel.runtime import READY_PREFIX
from tests.unit.deploy.manifests import (
    REPO_ROOT,
    build_context,
    dockerfile_entrypoint,
    dockerfile_env,
    dockerfile_instructions,
    dockerfile_stages,
    dockerfile_workdir,
    dockerignored,
    final_stage_user,
)

BASE_IMAGE = "python:3.11-slim"
BUILD_STEP_TIMEOUT_S = 300
GENERATORS = ("grpcio-tools", "mypy-protobuf")
_PROTOC_FLAG = re.compile(r"--(\w+_out)=")


def _pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _pins() -> dict[str, str]:
    """``name: version`` of every package of the lock file (``name==version`` lines)."""
    lines = (REPO_ROOT / "requirements.lock").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line and line[0].isalnum())


def test_two_stages_on_python_slim_and_a_non_root_user() -> None:
    builder, final = dockerfile_stages()
    assert builder[0] == f"FROM {BASE_IMAGE} AS builder"
    assert final[0] == f"FROM {BASE_IMAGE}"
    uid, gid = final_stage_user()
    assert uid > 0 and gid > 0
    assert any("COPY --from=builder" in line for line in final)
    # Nothing runs as root after USER: the last instructions only describe the image.
    after_user = final[[i for i, line in enumerate(final) if line.startswith("USER ")][0] :]
    assert not [line for line in after_user if line.startswith(("RUN ", "COPY ", "ADD "))]


def test_the_entrypoint_is_the_packaged_console_script() -> None:
    scripts = _pyproject()["project"]["scripts"]
    assert scripts[dockerfile_entrypoint()[0]] == "boltmq.cli:main"


def test_the_builder_generates_stubs_as_make_proto_does() -> None:
    builder = " ".join(dockerfile_stages()[0])
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "grpc_tools.protoc" in builder
    assert set(_PROTOC_FLAG.findall(builder)) == set(_PROTOC_FLAG.findall(makefile))
    assert "boltmq/v1/__init__.py" in builder
    pins = _pins()
    for name in GENERATORS:
        assert f"{name}=={pins[name]}" in builder, f"{name} is pinned to {pins[name]}"


def test_the_build_context_has_what_the_dockerfile_copies_and_no_local_state() -> None:
    copied = [
        source
        for stage in dockerfile_stages()
        for args in dockerfile_instructions(stage, "COPY")
        if "--from=" not in args
        for source in shlex.split(args)[:-1]
    ]
    assert copied
    for source in copied:
        assert (REPO_ROOT / source).exists(), source
        assert not dockerignored(source.rstrip("/")), f"{source} is in .dockerignore"
    for local in (
        ".venv",
        ".git",
        "boltmq/v1",
        "data",
        "services/store/__pycache__",
        "boltmq/console/assets/node_modules",
    ):
        assert dockerignored(local), f"{local} would be sent to the Docker daemon"


# ------------------------------------------------------------ the build, run
# The builder stage executed on this machine, as far as it can be without Docker.


@dataclass(frozen=True)
class BuiltImage:
    """What executing the Dockerfile's steps under ``root`` (the image's ``/``) left."""

    root: Path
    copied: frozenset[str]
    """Paths under the builder's WORKDIR right after its COPY steps, before any RUN."""
    wheel: Path
    python: Path
    """A clean interpreter: the venv's dependencies, not its editable BoltMQ."""
    site: Path
    """Where the wheel is installed (``pip install --target``), as the final stage does."""


def _in_root(root: Path, path: str) -> Path:
    """An image path (absolute, or relative to ``/``) under ``root``."""
    return root / path.lstrip("/")


def _copy_one(source: str, dest: Path, to_file: bool, context: frozenset[str]) -> None:
    """``COPY source dest``: a file, or a directory's contents, minus what is ignored.

    ``to_file``: ``dest`` names the copy of a single file (no trailing ``/``).
    """
    prefix = source.rstrip("/")
    files = sorted(
        p
        for p in context
        if (p == prefix or p.startswith(prefix + "/")) and (REPO_ROOT / p).is_file()
    )
    if not files:
        pytest.fail(f"COPY {source}: nothing in the build context (.dockerignore?)")
    for path in files:
        if path != prefix:
            target = dest / path.removeprefix(prefix + "/")
        else:
            target = dest if to_file else dest / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / path, target)


def _copy_builder_context(root: Path, builder: list[str]) -> Path:
    """The builder's COPY steps into its WORKDIR under ``root``; returns that directory."""
    workdir = _in_root(root, dockerfile_workdir(builder))
    workdir.mkdir(parents=True)
    context = build_context()
    for args in dockerfile_instructions(builder, "COPY"):
        *sources, dest = shlex.split(args)
        assert sources and not sources[0].startswith("--"), f"COPY {args}: flags not modelled"
        target = workdir / dest
        for source in sources:
            _copy_one(source, target, len(sources) == 1 and not dest.endswith("/"), context)
    return workdir


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_STEP_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-4000:]}")


def _wheel_dir(pip_wheel: list[str]) -> str:
    """The ``--wheel-dir`` of a ``pip wheel`` command line."""
    for i, arg in enumerate(pip_wheel):
        if arg.startswith("--wheel-dir="):
            return arg.partition("=")[2]
        if arg == "--wheel-dir" and i + 1 < len(pip_wheel):
            return pip_wheel[i + 1]
    pytest.fail(f"{' '.join(pip_wheel)}: no --wheel-dir for the final stage to copy")


def _run_builder(root: Path, workdir: Path, builder: list[str]) -> str:
    """The builder's RUN steps, from the Dockerfile text, with this venv for ``python``.

    ``pip install`` of the generators is skipped (no network; the venv's
    versions are checked against the pins instead). ``pip wheel`` runs with
    ``--no-deps --no-build-isolation``: only BoltMQ's wheel is built, from this
    venv's setuptools; the dependencies' wheels would come from PyPI.
    Any other RUN runs as written under ``sh``. Returns the wheel directory.
    """
    venv_bin = Path(sys.executable).parent
    env = dict(
        os.environ,
        **dockerfile_env(builder),
        PATH=os.pathsep.join([str(venv_bin), os.environ.get("PATH", "")]),
    )
    wheel_dirs = []
    for command in dockerfile_instructions(builder, "RUN"):
        argv = shlex.split(command)
        if argv[:2] == ["pip", "install"]:
            continue
        if argv[:2] == ["pip", "wheel"]:
            wheel_dirs.append(_wheel_dir(argv))
            paths = [str(_in_root(root, a)) if a.startswith("/") else a for a in argv[2:]]
            _run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", *paths],
                workdir,
                env,
            )
        else:
            _run(["sh", "-c", command], workdir, env)
    assert len(wheel_dirs) == 1, "the builder runs `pip wheel` once"
    return wheel_dirs[0]


def _clean_interpreter(path: Path) -> Path:
    """A venv whose only packages are this venv's, through a path-only ``.pth``.

    The venv's own BoltMQ is an editable install, whose import hook would load
    any module missing from the wheel from the checkout and hide the defect; a
    ``.pth`` line naming a directory adds it to ``sys.path`` without running
    the ``.pth`` files inside it, so that hook never loads.
    """
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    site_dir = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
    dependencies = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site_dir / "dependencies.pth").write_text("".join(f"{d}\n" for d in dependencies))
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    """The builder stage executed under a temporary root, its wheel installed."""
    root = tmp_path_factory.mktemp("image")
    builder = dockerfile_stages()[0]
    workdir = _copy_builder_context(root, builder)
    copied = frozenset(str(p.relative_to(workdir)) for p in workdir.rglob("*"))
    wheel_dir = _run_builder(root, workdir, builder)
    assert f"COPY --from=builder {wheel_dir} " in " ".join(dockerfile_stages()[-1])
    wheels = list(_in_root(root, wheel_dir).glob("boltmq-*.whl"))
    assert len(wheels) == 1, f"expected one BoltMQ wheel in {wheel_dir}, got {wheels}"
    python = _clean_interpreter(root / "python")
    site = root / "site"
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheels[0]),
        ],
        root,
        dict(os.environ),
    )
    return BuiltImage(root, copied, wheels[0], python, site)


def test_the_builder_copies_the_sources_but_no_stubs_or_bytecode(image: BuiltImage) -> None:
    sources = {
        "pyproject.toml",
        "setup.py",
        "requirements.lock",
        "README.md",
        "boltmq/cli/main.py",
        "protos/boltmq/v1/store.proto",
        *(f"{m.replace('.', '/')}.py" for m in SERVICE_MODULES.values()),
    }
    assert sources <= image.copied
    # The builder regenerates the stubs: a stale local boltmq/v1 must not reach it.
    assert not [p for p in image.copied if p.startswith("boltmq/v1") or "__pycache__" in p]


def test_the_generators_in_this_venv_are_the_pinned_ones() -> None:
    pins = _pins()
    for name in GENERATORS:
        assert importlib.metadata.version(name) == pins[name], f"{name}: run make install"


def _protos() -> list[str]:
    return sorted(p.stem for p in (REPO_ROOT / "protos" / "boltmq" / "v1").glob("*.proto"))


def test_the_wheel_holds_the_stubs_every_service_and_the_console_script(image: BuiltImage) -> None:
    with zipfile.ZipFile(image.wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    assert _protos()
    for proto in _protos():
        assert {f"boltmq/v1/{proto}_pb2.py", f"boltmq/v1/{proto}_pb2_grpc.py"} <= names, proto
    for module in SERVICE_MODULES.values():
        assert f"{module.replace('.', '/')}.py" in names, module
    # the web console's pages, style and script ship as package data
    assert {
        "boltmq/console/app.py",
        "boltmq/console/templates/base.html",
        "boltmq/console/static/console.js",
        "boltmq/console/static/console.css",
    } <= names
    script = dockerfile_entrypoint()[0]
    assert f"{script} = {_pyproject()['project']['scripts'][script]}" in entry_points


def _child_env(image: BuiltImage) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOLTMQ_")}
    return dict(env, **dockerfile_env(dockerfile_stages()[-1]), PYTHONPATH=str(image.site))


def test_every_service_module_imports_from_the_installed_wheel(image: BuiltImage) -> None:
    modules = [
        "boltmq.cli.main",
        "boltmq.console.app",
        *SERVICE_MODULES.values(),
        *(f"boltmq.v1.{p}_pb2_grpc" for p in _protos()),
    ]
    probe = (
        "import importlib, json, sys; "
        "print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))"
    )
    done = subprocess.run(
        [str(image.python), "-c", probe, *modules],
        cwd=image.root,
        env=_child_env(image),
        capture_output=True,
        text=True,
        timeout=BUILD_STEP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for module, path in json.loads(done.stdout).items():
        assert Path(path).is_relative_to(image.site), f"{module} imported from {path}"


def _await_ready(proc: subprocess.Popen[str]) -> str:
    """The READY line :mod:`boltmq.kernel.runtime` prints, or "" if the process ends first."""
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline()
            if line.startswith(f"{READY_PREFIX} "):
                return line.strip()
    return ""


def test_the_entrypoint_of_the_installed_wheel_serves_and_stops_on_sigterm(
    image: BuiltImage,
) -> None:
    workdir = _in_root(image.root, dockerfile_workdir(dockerfile_stages()[-1]))
    workdir.mkdir(parents=True, exist_ok=True)
    script, *args = dockerfile_entrypoint()
    log = image.root / "registry.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [
                str(image.site / "bin" / script),
                *args,
                "registry",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ],
            cwd=workdir,
            env=_child_env(image),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        ready = _await_ready(proc)
        assert re.fullmatch(rf"{READY_PREFIX} registry 127\.0\.0\.1:[1-9]\d*", ready), (
            f"no READY line; stderr:\n{log.read_text()[-4000:]}"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_TIMEOUT_S) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
