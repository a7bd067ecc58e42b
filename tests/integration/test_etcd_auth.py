"""``boltmq etcd-auth`` against a real etcd, run as an operator (or a Kubernetes Job) runs it.

The command turns authentication on: afterwards a client without credentials
(or with a wrong password) is refused, the HA user reads and writes under the
controller's prefix and nowhere else, and ``root`` keeps the whole key space. A
second run changes nothing; a run on an etcd where some users or roles already
exist completes the rest. Wrong passwords, missing or empty password files, bad
endpoints and an unreachable etcd fail with one clear line and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aetcd
import aetcd.exceptions
import pytest

from boltmq.cli.etcd_server import EtcdServer
from tests.integration.procs import REPO_ROOT
from tests.integration.test_cli import COMMAND_TIMEOUT_S, UNREACHABLE, one_line_error, run_cli
from tests.integration.test_ha_controller_auth import read_state

USER = "boltmq-ha"
PREFIX = "/boltmq"
ROOT_PASSWORD = "root: correct horse"
USER_PASSWORD = "ha: battery staple"


@pytest.fixture(scope="module")
def etcd_on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd for the module, its authentication turned on by the first test."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd") / "data").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("secrets")
    (directory / "root-password").write_text(ROOT_PASSWORD + "\n")
    (directory / "ha-password").write_text(USER_PASSWORD + "\n")
    (directory / "empty").write_text("\n")
    (directory / "other").write_text("not the password\n")
    return directory


def etcd_auth(
    endpoints: str, secrets: Path, *extra: str, root: str = "root-password", ha: str = "ha-password"
) -> Any:
    return run_cli(
        "etcd-auth",
        "--endpoints",
        endpoints,
        "--root-password-file",
        str(secrets / root),
        "--user",
        USER,
        "--user-password-file",
        str(secrets / ha),
        *extra,
    )


def put_get(etcd: EtcdServer, credentials: tuple[str, str] | None, key: bytes) -> bytes:
    """Put ``key`` then read it back with the official client."""

    async def run() -> bytes:
        host, _, port = etcd.endpoint.rpartition(":")
        user, password = credentials or (None, None)
        async with aetcd.Client(host, int(port), username=user, password=password) as client:
            await client.put(key, b"value")
            got = await client.get(key)
            assert got is not None
            return bytes(got.value)

    return asyncio.run(run())


def auth_state(etcd: EtcdServer) -> dict[str, Any]:
    """Users, their roles, and roles' permissions, read as root through the gateway."""

    def call(path: str, body: dict[str, Any], token: str = "") -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://{etcd.endpoint}/v3/auth/{path}",
            data=json.dumps(body).encode(),
            headers={"Authorization": token} if token else {},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            doc: dict[str, Any] = json.loads(answer.read())
        return doc

    token = call("authenticate", {"name": "root", "password": ROOT_PASSWORD})["token"]
    users = call("user/list", {}, token)["users"]
    roles = call("role/list", {}, token)["roles"]
    return {
        "users": {u: call("user/get", {"name": u}, token).get("roles") for u in users},
        "roles": {r: call("role/get", {"role": r}, token).get("perm") for r in roles},
    }


# ---------------------------------------------------------------- turning it on
def test_the_command_turns_authentication_on(etcd_on: EtcdServer, secrets_dir: Path) -> None:
    put_get(etcd_on, None, b"/boltmq/before")  # open before
    result = etcd_auth(etcd_on.endpoint, secrets_dir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "enabled authentication" in lines
    assert f"added user {USER}" in lines and "added user root" in lines
    assert lines[-1] == f"etcd authentication is on; {USER} may read and write {PREFIX}/"
    start = base64.b64encode(b"/boltmq/").decode()
    end = base64.b64encode(b"/boltmq0").decode()
    assert auth_state(etcd_on) == {
        "users": {"root": ["root"], USER: [USER]},
        "roles": {USER: [{"permType": "READWRITE", "key": start, "range_end": end}]},
    }


def test_only_the_ha_user_under_its_prefix_and_root_reach_the_keys(
    etcd_on: EtcdServer, secrets_dir: Path
) -> None:
    assert put_get(etcd_on, (USER, USER_PASSWORD), b"/boltmq/DefaultCluster/g/x") == b"value"
    read_state(etcd_on, (USER, USER_PASSWORD))  # the controller's own client and keys
    assert put_get(etcd_on, ("root", ROOT_PASSWORD), b"/anything") == b"value"
    for credentials, key in (
        (None, b"/boltmq/DefaultCluster/g/x"),  # no credentials
        ((USER, "wrong"), b"/boltmq/DefaultCluster/g/x"),
        (("root", "wrong"), b"/boltmq/DefaultCluster/g/x"),
        ((USER, USER_PASSWORD), b"/other"),  # outside the prefix
        ((USER, USER_PASSWORD), b"/boltmq"),  # the prefix itself, not under it
        ((USER, USER_PASSWORD), b"/boltmqx/y"),  # a sibling sharing the prefix's letters
    ):
        with pytest.raises(aetcd.exceptions.ClientError):
            put_get(etcd_on, credentials, key)


def test_a_second_run_changes_nothing(etcd_on: EtcdServer, secrets_dir: Path) -> None:
    before = auth_state(etcd_on)
    result = etcd_auth(etcd_on.endpoint, secrets_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"etcd authentication is on; {USER} may read and write {PREFIX}/ (nothing changed)"
    ]
    assert auth_state(etcd_on) == before


def test_wrong_passwords_on_an_etcd_already_set_up_fail_clearly(
    etcd_on: EtcdServer, secrets_dir: Path
) -> None:
    before = auth_state(etcd_on)
    wrong_root = etcd_auth(etcd_on.endpoint, secrets_dir, root="other")
    one_line_error(wrong_root, "etcd refused 'root'", "the root password file")
    wrong_user = etcd_auth(etcd_on.endpoint, secrets_dir, ha="other")
    one_line_error(wrong_user, f"etcd refused '{USER}'", f"etcdctl user passwd {USER}")
    assert auth_state(etcd_on) == before


def test_users_and_roles_made_beforehand_are_completed(etcd: EtcdServer, secrets_dir: Path) -> None:
    for path, body in (
        ("user/add", {"name": "root", "password": ROOT_PASSWORD}),
        ("role/add", {"name": USER}),
    ):
        request = urllib.request.Request(
            f"http://{etcd.endpoint}/v3/auth/{path}", data=json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
    result = etcd_auth(etcd.endpoint, secrets_dir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "added user root" not in lines and f"added role {USER}" not in lines
    assert "granted role root to user root" in lines and "enabled authentication" in lines
    assert put_get(etcd, (USER, USER_PASSWORD), b"/boltmq/c/g/k") == b"value"
    with pytest.raises(aetcd.exceptions.ClientError):
        put_get(etcd, None, b"/boltmq/c/g/k")


def test_the_command_waits_for_an_etcd_that_starts_later(tmp_path: Path, secrets_dir: Path) -> None:
    """What the Kubernetes Job relies on: started before etcd answers, it keeps trying."""
    etcd = EtcdServer(tmp_path / "late")  # its ports chosen, nothing listening yet
    command = [
        *("etcd-auth", "--endpoints", etcd.endpoint, "--wait", "60", "--user", USER),
        *("--root-password-file", str(secrets_dir / "root-password")),
        *("--user-password-file", str(secrets_dir / "ha-password")),
    ]
    waiting = subprocess.Popen(
        [sys.executable, "-m", "boltmq.cli", *command],
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # nothing answers: it keeps trying
            waiting.wait(timeout=1.5)
        etcd.start()
        out, err = waiting.communicate(timeout=COMMAND_TIMEOUT_S)
        assert waiting.returncode == 0, err
        assert "enabled authentication" in out.splitlines()
        assert put_get(etcd, (USER, USER_PASSWORD), b"/boltmq/c/g/k") == b"value"
    finally:
        waiting.kill()
        waiting.wait()
        etcd.stop()


# ---------------------------------------------------------------- bad input
def test_bad_input_fails_with_one_clear_line(etcd_on: EtcdServer, secrets_dir: Path) -> None:
    endpoint = etcd_on.endpoint
    for result, fragments in (
        (etcd_auth(endpoint, secrets_dir, root="missing"), ("--root-password-file", "missing")),
        (etcd_auth(endpoint, secrets_dir, ha="empty"), ("--user-password-file", "no password")),
        (etcd_auth("localhost", secrets_dir), ("'localhost'", "expected host:port")),
        (etcd_auth("http://h:2379", secrets_dir), ("expected host:port",)),
        (etcd_auth(f"{endpoint},h:99999", secrets_dir), ("'h:99999'",)),
        (etcd_auth(UNREACHABLE, secrets_dir), ("no etcd endpoint answered", UNREACHABLE)),
        (
            etcd_auth(UNREACHABLE, secrets_dir, "--wait", "1"),
            ("no etcd endpoint answered",),
        ),
        (etcd_auth(endpoint, secrets_dir, "--prefix", "boltmq/"), ("prefix 'boltmq/'",)),
    ):
        one_line_error(result, *fragments)
    as_root = run_cli(
        "etcd-auth",
        "--endpoints",
        endpoint,
        "--root-password-file",
        str(secrets_dir / "root-password"),
        "--user",
        "root",
        "--user-password-file",
        str(secrets_dir / "ha-password"),
    )
    one_line_error(as_root, "user 'root'")
    on_the_command_line = run_cli(
        "etcd-auth", "--endpoints", endpoint, "--root-password", ROOT_PASSWORD
    )
    assert on_the_command_line.returncode == 2  # no such option: passwords come from files
    assert "No such option '--root-password'" in on_the_command_line.stderr
