"""The rendered Kubernetes manifests of ``deploy/k8s``, and each container as a pod runs it.

``kubectl kustomize`` renders a target (``base`` or an overlay); every
container of every StatefulSet is then resolved for each pod ordinal the way
the kubelet and the image would run it: ``envFrom`` ConfigMaps, then ``env``
(downward-API fields filled with sample values, ``$(VAR)`` references
expanded), the Dockerfile's ENTRYPOINT followed by the container's args parsed
by the real ``boltmq`` click command, and the service config built by
:func:`boltmq.cli.main.service_config` from that environment. Nothing here repeats a
flag or a setting name by hand.

A setting naming a file the config reads while it is built (``FILES_READ_AT_LOAD``: a
password) must name a file of a Secret the container mounts; the config is built with
a stand-in file in its place, holding ``sample-<secret>-<key>``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from docker.utils.build import PatternMatcher, exclude_paths

from boltmq.cli.main import main, service_config

REPO_ROOT = Path(__file__).resolve().parents[3]
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
TARGETS = {
    "base": K8S_DIR / "base",
    "dev": K8S_DIR / "overlays" / "dev",
    "production": K8S_DIR / "overlays" / "production",
}
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
SAMPLE_POD_IP = "10.1.2.3"
APP_NAME_LABEL = "app.kubernetes.io/name"
RENDER_TIMEOUT_S = 120
_VAR_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_LABEL_FIELD = re.compile(r"metadata\.labels\['([^']+)'\]")
FILES_READ_AT_LOAD = frozenset({"BOLTMQ_CONTROLLER_PASSWORD_FILE"})
"""Variables naming a file the service's config reads while it is built."""


class ManifestError(AssertionError):
    """A manifest a kubelet could not run as written (unknown reference, field...)."""


def kubectl() -> str:
    """Path of kubectl; the test fails with the fix when it is missing."""
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl not found on PATH: the deploy tests render deploy/k8s with "
            "`kubectl kustomize` (kustomize v5); install kubectl >= 1.27"
        )
    return path


@cache
def render(target: str) -> tuple[dict[str, Any], ...]:
    """Every object ``kubectl kustomize`` renders for ``target``."""
    return render_dir(TARGETS[target])


def render_dir(path: Path) -> tuple[dict[str, Any], ...]:
    """Every object ``kubectl kustomize`` renders for the kustomization in ``path``."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed: {done.stderr.strip()}")
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def dockerfile_entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form), from the Dockerfile."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("ENTRYPOINT ")]
    assert len(lines) == 1, "the Dockerfile needs exactly one ENTRYPOINT"
    entrypoint = json.loads(lines[0].removeprefix("ENTRYPOINT "))
    assert isinstance(entrypoint, list), "ENTRYPOINT must use the exec (JSON) form"
    return entrypoint


def dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), one list per stage."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            stages.append([])
        if line and not line.startswith("#"):
            assert stages, "the Dockerfile must start with FROM"
            stages[-1].append(line)
    return stages


def dockerfile_instructions(stage: list[str], keyword: str) -> list[str]:
    """The arguments of each ``keyword`` instruction (``RUN``, ``COPY``...) of ``stage``."""
    return [line.split(None, 1)[1] for line in stage if line.split(None, 1)[0] == keyword]


def dockerfile_workdir(stage: list[str]) -> str:
    """The stage's last ``WORKDIR`` (absolute), where its RUN and COPY happen."""
    workdirs = dockerfile_instructions(stage, "WORKDIR")
    assert workdirs and workdirs[-1].startswith("/"), "each stage sets an absolute WORKDIR"
    return workdirs[-1]


def dockerfile_env(stage: list[str]) -> dict[str, str]:
    """The stage's ``ENV NAME=VALUE ...`` variables (the ``NAME=VALUE`` form only)."""
    env: dict[str, str] = {}
    for args in dockerfile_instructions(stage, "ENV"):
        for item in shlex.split(args):
            name, sep, value = item.partition("=")
            assert sep, f"ENV {args}: use the NAME=VALUE form"
            env[name] = value
    return env


def dockerignore_patterns() -> list[str]:
    """The patterns of ``.dockerignore`` (comments and blank lines dropped)."""
    return [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def dockerignored(path: str) -> bool:
    """Whether ``.dockerignore`` keeps ``path`` (relative to the repo) out of the context.

    Docker's own rules (a pattern excluding a directory excludes all below it,
    ``**``, ``!`` exceptions), as the Docker SDK for Python implements them.
    """
    return bool(PatternMatcher(dockerignore_patterns()).matches(path))


def build_context() -> frozenset[str]:
    """Every path (file or directory, relative to the repo) ``docker build .`` sends."""
    return frozenset(exclude_paths(str(REPO_ROOT), dockerignore_patterns()))


def final_stage_user() -> tuple[int, int]:
    """``USER uid:gid`` of the image's final stage (numeric, as runAsNonRoot needs)."""
    users = [line.split()[1] for line in dockerfile_stages()[-1] if line.startswith("USER ")]
    assert len(users) == 1, "the final stage needs exactly one USER"
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit() and gid.isdigit(), f"USER {users[0]}: use numeric uid:gid"
    return int(uid), int(gid)


def objects_of(objects: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    """Objects of one kind by name."""
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def expand(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` references replaced as the kubelet does; an unknown one is an error.

    (The kubelet would leave an unknown reference as it is, which for BoltMQ means
    an address like ``$(POD_NAME).svc:10911`` failing at start-up.)
    """

    def one(match: re.Match[str]) -> str:
        if match[1] not in env:
            raise ManifestError(f"$({match[1]}) refers to no variable defined before it")
        return env[match[1]]

    return _VAR_REFERENCE.sub(one, value)


def _field(path: str, pod_name: str, namespace: str, labels: dict[str, str]) -> str:
    fields = {
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "status.podIP": SAMPLE_POD_IP,
    }
    label = _LABEL_FIELD.fullmatch(path)
    if label is not None:
        if label[1] not in labels:
            raise ManifestError(f"downward-API field {path!r}: the pod has no such label")
        return labels[label[1]]
    if path not in fields:
        raise ManifestError(f"downward-API field {path!r} is not one the tests can fill")
    return fields[path]


def container_env(
    container: dict[str, Any],
    config_maps: dict[str, dict[str, Any]],
    pod_name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
) -> dict[str, str]:
    """The container's environment: envFrom ConfigMaps first, ``env`` over them.

    ``labels`` are the pod's (``metadata.labels['key']`` fields). A Secret's key
    stands in as ``sample-<secret>-<key>`` (the tests have no Secrets).
    """
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        if name not in config_maps:
            raise ManifestError(f"envFrom names ConfigMap {name!r}, which is not rendered")
        env.update(config_maps[name].get("data", {}))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
        elif "secretKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = f"sample-{ref['name']}-{ref['key']}"
        else:
            env[item["name"]] = _field(
                item["valueFrom"]["fieldRef"]["fieldPath"], pod_name, namespace, labels or {}
            )
    return env


def secret_files(container: dict[str, Any], pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each file a Secret volume with explicit ``items`` puts in ``container`` of ``pod``
    (a pod spec): path -> (Secret, key)."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes.get(mount["name"], {}).get("secret")  # (a PVC is no pod volume)
        for item in (secret or {}).get("items", []):
            path = f"{mount['mountPath'].rstrip('/')}/{item['path']}"
            files[path] = (secret["secretName"], item["key"])
    return files


_STAND_INS = tempfile.TemporaryDirectory(prefix="boltmq-deploy-secrets-")


def stand_in(path: str, files: dict[str, tuple[str, str]]) -> str:
    """A local file holding ``sample-<secret>-<key>`` for the Secret file ``path`` (one of
    ``files``, from :func:`secret_files`); ManifestError when ``path`` is none of them."""
    if path not in files:
        raise ManifestError(f"{path} is no file of a Secret the container mounts")
    secret, key = files[path]
    local = Path(_STAND_INS.name) / path.lstrip("/")
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(f"sample-{secret}-{key}\n")
    return str(local)


def check_runs_like_a_boltmq_pod(pod: dict[str, Any], accounts: dict[str, Any]) -> None:
    """A pod spec running the BoltMQ image: the image's non-root user, no service account
    token, no service links, seccomp, and each container without privileges on a
    read-only root filesystem with an emptyDir on /tmp."""
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == final_stage_user()
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] in accounts
    assert pod["automountServiceAccountToken"] is False
    # Service links would add BOLTMQ_<SERVICE>_PORT=tcp://... variables, and
    # BOLTMQ_STORE_PORT is a store setting.
    assert pod["enableServiceLinks"] is False
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        tmp = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"]
        assert "emptyDir" in volumes[tmp], container["name"]


def parse_serve(argv: list[str]) -> dict[str, Any]:
    """``boltmq <argv>`` parsed by the real click command: the ``serve`` params."""
    name, *rest = argv
    command = main.commands.get(name)
    if command is None:
        raise ManifestError(f"boltmq has no command {name!r}")
    assert name == "serve", "every container runs `boltmq serve`"
    with command.make_context(name, list(rest)) as ctx:
        return dict(ctx.params)


@dataclass
class Container:
    """One container of one pod (StatefulSet ordinal), resolved as it would run."""

    workload: dict[str, Any]
    spec: dict[str, Any]
    ordinal: int
    pod_name: str
    namespace: str
    env: dict[str, str]
    params: dict[str, Any]
    config: Any

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def service(self) -> str:
        return str(self.params["service"])

    @property
    def pod(self) -> dict[str, Any]:
        return dict(self.workload["spec"]["template"]["spec"])

    @property
    def config_fields(self) -> set[str]:
        return {f.name for f in dataclasses.fields(self.config)}

    def mounts(self) -> dict[str, str]:
        """mountPath -> volume name."""
        return {m["mountPath"]: m["name"] for m in self.spec.get("volumeMounts", [])}


def resolve(
    container: dict[str, Any],
    workload: dict[str, Any],
    config_maps: dict[str, dict[str, Any]],
    ordinal: int,
) -> Container:
    """``container`` of pod ``ordinal`` of ``workload`` (a StatefulSet), as it would run."""
    pod_name = f"{workload['metadata']['name']}-{ordinal}"
    namespace = workload["metadata"].get("namespace", "default")
    labels = dict(workload["spec"]["template"]["metadata"].get("labels", {}))
    env = container_env(container, config_maps, pod_name, namespace, labels)
    entrypoint = container.get("command") or dockerfile_entrypoint()
    assert entrypoint[0] == "boltmq", f"{container['name']}: the entrypoint must be boltmq"
    argv = [expand(arg, env) for arg in [*entrypoint[1:], *container.get("args", [])]]
    params = parse_serve(argv)
    config_env = dict(env)
    for name in FILES_READ_AT_LOAD & env.keys():
        files = secret_files(container, workload["spec"]["template"]["spec"])
        config_env[name] = stand_in(env[name], files)
    _, config = service_config(
        params["service"],
        params["config_file"],
        params["host"],
        params["port"],
        params["settings"],
        params["statefulset_pod"],
        env=config_env,
    )
    return Container(workload, container, ordinal, pod_name, namespace, env, params, config)


@cache
def containers(target: str) -> tuple[Container, ...]:
    """Every BoltMQ container of every pod of every StatefulSet of ``target``."""
    return containers_of(render(target))


def boltmq_workloads(objects: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    """The StatefulSets and Deployments (the MQTT gateway) running ``boltmq serve`` (not
    those of the etcd component, nor the web console's, which runs ``boltmq console``
    and has its own checks in test_k8s_console.py) by name."""
    workloads = {**objects_of(objects, "StatefulSet"), **objects_of(objects, "Deployment")}
    return {
        name: workload
        for name, workload in workloads.items()
        if (labels := workload["spec"]["template"]["metadata"]["labels"]).get(APP_NAME_LABEL)
        == "boltmq"
        and labels.get("app.kubernetes.io/component") != "console"
    }


def containers_of(objects: tuple[dict[str, Any], ...]) -> tuple[Container, ...]:
    """Every BoltMQ container of every pod of every workload of rendered ``objects``."""
    config_maps = objects_of(objects, "ConfigMap")
    out = []
    for workload in boltmq_workloads(objects).values():
        for ordinal in range(workload["spec"].get("replicas", 1)):
            for spec in workload["spec"]["template"]["spec"]["containers"]:
                try:
                    out.append(resolve(spec, workload, config_maps, ordinal))
                except click.ClickException as exc:
                    raise ManifestError(
                        f"{workload['metadata']['name']}/{spec['name']}: {exc.format_message()}"
                    ) from exc
    return tuple(out)
