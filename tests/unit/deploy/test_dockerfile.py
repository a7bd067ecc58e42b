"""The Dockerfile and .dockerignore, read as text (no Docker engine on the test machines).

The image itself is not built here; these tests keep the Dockerfile in step
with what it packages: the generator pins of pyproject.toml, the Makefile's
protoc run, the console script it starts, and a build context that holds
every file it copies.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib

from tests.unit.deploy.manifests import (
    REPO_ROOT,
    dockerfile_entrypoint,
    dockerfile_stages,
    final_stage_user,
)

BASE_IMAGE = "python:3.11-slim"
GENERATORS = ("grpcio-tools", "mypy-protobuf")
_PROTOC_FLAG = re.compile(r"--(\w+_out)=")


def _pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _pins() -> dict[str, str]:
    project = _pyproject()["project"]
    requirements = [*project["dependencies"],
                    *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return dict(r.split("==", 1) for r in requirements)


def test_two_stages_on_python_slim_and_a_non_root_user() -> None:
    builder, final = dockerfile_stages()
    assert builder[0] == f"FROM {BASE_IMAGE} AS builder"
    assert final[0] == f"FROM {BASE_IMAGE}"
    uid, gid = final_stage_user()
    assert uid > 0 and gid > 0
    assert any("COPY --from=builder" in line for line in final)
    # Nothing runs as root after USER: the last instructions only describe the image.
    after_user = final[[i for i, line in enumerate(final) if line.startswith("USER ")][0]:]
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


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/")
               for p in patterns)


def test_the_build_context_has_what_the_dockerfile_copies_and_no_local_state() -> None:
    patterns = [line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    copied = [line.split()[1] for stage in dockerfile_stages() for line in stage
              if line.startswith("COPY ") and "--from=" not in line]
    assert copied
    for source in copied:
        assert (REPO_ROOT / source).exists(), source
        assert not _ignored(source.rstrip("/"), patterns), f"{source} is in .dockerignore"
    for local in (".venv", ".git", "boltmq/v1", "data"):
        assert _ignored(local, patterns), f"{local} would be sent to the Docker daemon"
