"""``boltmq etcd-auth``: turn etcd's authentication on for the HA controller, idempotently.

The HA controller (docs/ha.md) keeps each broker group's election under
``<prefix>/<cluster>/<group>/`` in etcd. With authentication off, anything that
reaches etcd's client port could rewrite who is master; this command makes etcd
answer only to its users (docs/deploy.md, step 7):

- ``root`` (etcd needs it, with role ``root``, before it enables authentication),
  with the password of ``--root-password-file``: the operator's ``etcdctl``;
- a role and a user both named ``--user``, the user's password from
  ``--user-password-file``, the role allowed READWRITE on exactly the keys under
  ``--prefix + "/"`` (the HA services' ``controller_username``);
- authentication enabled.

It talks to etcd's JSON gateway (``POST /v3/auth/...``, keys base64) in
plaintext, endpoint after endpoint until one answers. It reads before it writes:
whether authentication is on (``/v3/auth/status``, which etcd refuses without
credentials when it is on; etcd before 3.5 has no such call, then an
unauthenticated ``user/list`` tells the same way), the users, the role and its
permissions, and changes only what is missing (an "already exists" from a run
beside it is no error). Once authentication is on it works as ``root``. Last, it
logs in as ``root`` and as the HA user, so a password that differs from the
files fails the run. :func:`turn_on` returns the changes it made; none on an
etcd already set up.

Passwords are read from files (first line, a mounted Secret), never flags.
``--wait`` keeps retrying (tenacity, bounded) while no endpoint answers, so a
Kubernetes Job may start before etcd has a quorum.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from aetcd.utils import prefix_range_end
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from boltmq.cli.messages import fail
from services.ha.config import CONTROLLER_PREFIX_PATTERN, HAConfig

ROOT = "root"
DEFAULT_PREFIX = HAConfig.controller_prefix
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_ENDPOINT = re.compile(r"^([A-Za-z0-9_.\-]+|\[[0-9a-fA-F:.]+\]):(\d{1,5})$")
_UNAVAILABLE_CODES = (4, 14)
"""gRPC DEADLINE_EXCEEDED and UNAVAILABLE: a member without a quorum (try again)."""
_AUTH_REQUIRED = ("user name is empty", "permission denied", "invalid auth token")
_EXISTS = "already exists"
RETRY_MAX_PAUSE_S = 5.0


class EtcdAuthError(RuntimeError):
    """etcd refused a step (its message), or the input is unusable."""


class EtcdUnreachable(EtcdAuthError):
    """No endpoint answered (or none had a quorum): worth trying again."""


@dataclass(frozen=True)
class AuthSpec:
    """What :func:`turn_on` sets up."""

    root_password: str
    user: str
    user_password: str
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.user) or self.user == ROOT:
            raise EtcdAuthError(
                f"user {self.user!r}: 1-64 letters, digits, '_', '.' or '-', and not {ROOT!r}"
            )
        if not CONTROLLER_PREFIX_PATTERN.fullmatch(self.prefix):
            raise EtcdAuthError(
                f"prefix {self.prefix!r}: start with '/', not end with one (the HA "
                "controller's controller_prefix)"
            )
        if not self.root_password or not self.user_password:
            raise EtcdAuthError("empty password")

    def permission(self) -> dict[str, str]:
        """The role's one permission as the gateway writes it (keys base64)."""
        start = (self.prefix + "/").encode()
        return {
            "permType": "READWRITE",
            "key": base64.b64encode(start).decode(),
            "range_end": base64.b64encode(prefix_range_end(start)).decode(),
        }


def read_password_file(path: Path, what: str) -> str:
    """The first line of ``path`` (a mounted Secret), without its line end."""
    try:
        with path.open(encoding="utf-8") as file:
            password = file.readline().rstrip("\r\n")
    except OSError as exc:
        raise EtcdAuthError(f"{what} {str(path)!r} cannot be read: {exc.strerror}") from None
    if not password:
        raise EtcdAuthError(f"{what} {str(path)!r} holds no password")
    return password


def parse_endpoints(text: str) -> tuple[str, ...]:
    """Comma-separated ``host:port`` endpoints; EtcdAuthError on a bad one."""
    endpoints = tuple(e.strip() for e in text.split(",") if e.strip())
    if not endpoints:
        raise EtcdAuthError("no etcd endpoint given")
    for endpoint in endpoints:
        match = _ENDPOINT.fullmatch(endpoint)
        if match is None or not 1 <= int(match[2]) <= 65535:
            raise EtcdAuthError(f"etcd endpoint {endpoint!r}: expected host:port")
    return endpoints


class _Gateway:
    """POSTs to etcd's JSON gateway, trying the endpoints in turn."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float) -> None:
        self._endpoints = tuple(endpoints)
        self._timeout_s = timeout_s
        self.token = ""

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        failures = []
        for endpoint in self._endpoints:
            try:
                return self._call_one(endpoint, path, body)
            except EtcdUnreachable as exc:
                failures.append(f"{endpoint}: {exc}")
        raise EtcdUnreachable("no etcd endpoint answered (" + "; ".join(failures) + ")")

    def _call_one(self, endpoint: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = self.token
        request = urllib.request.Request(
            f"http://{endpoint}/v3/auth/{path}", data=json.dumps(body).encode(), headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            if exc.code == 404 and not raw.lstrip().startswith(b"{"):
                raise _NotServed(path) from None
        except (OSError, ValueError) as exc:  # refused, timed out, unresolvable name
            raise EtcdUnreachable(str(getattr(exc, "reason", exc))) from None
        try:
            doc = json.loads(raw)
        except ValueError:
            raise EtcdUnreachable(f"not an etcd answer: {raw[:80]!r}") from None
        if not isinstance(doc, dict):
            raise EtcdUnreachable(f"not an etcd answer: {raw[:80]!r}")
        if "error" in doc:
            message = str(doc.get("message") or doc["error"])
            if doc.get("code") in _UNAVAILABLE_CODES:
                raise EtcdUnreachable(message)
            raise EtcdAuthError(f"etcd refused {path}: {message}")
        return doc


class _NotServed(Exception):
    """The gateway has no such call (etcd before 3.5 has no auth/status)."""


def _auth_enabled(gateway: _Gateway) -> bool:
    try:
        return bool(gateway.call("status", {}).get("enabled", False))  # false is omitted
    except _NotServed:
        pass
    except EtcdAuthError as exc:
        if not any(text in str(exc) for text in _AUTH_REQUIRED):
            raise
        return True
    try:
        gateway.call("user/list", {})
    except EtcdAuthError as exc:
        if isinstance(exc, EtcdUnreachable) or not any(t in str(exc) for t in _AUTH_REQUIRED):
            raise
        return True
    return False


def _login(gateway: _Gateway, user: str, password: str, what: str) -> str:
    try:
        return str(gateway.call("authenticate", {"name": user, "password": password})["token"])
    except EtcdUnreachable:
        raise
    except EtcdAuthError as exc:
        raise EtcdAuthError(
            f"etcd refused {user!r} with the password of {what} ({exc}): change it with "
            f"`etcdctl user passwd {user}`, or put etcd's password in {what}"
        ) from None


def _add(gateway: _Gateway, path: str, body: dict[str, Any]) -> bool:
    """One ``*/add``; False when another run made it first."""
    try:
        gateway.call(path, body)
    except EtcdAuthError as exc:
        if isinstance(exc, EtcdUnreachable) or _EXISTS not in str(exc):
            raise
        return False
    return True


def _apply(gateway: _Gateway, spec: AuthSpec) -> list[str]:
    changes: list[str] = []
    enabled = _auth_enabled(gateway)
    if enabled:
        gateway.token = _login(gateway, ROOT, spec.root_password, "the root password file")
    users = set(gateway.call("user/list", {}).get("users", []))
    roles = set(gateway.call("role/list", {}).get("roles", []))
    if ROOT not in users and _add(
        gateway, "user/add", {"name": ROOT, "password": spec.root_password}
    ):
        changes.append(f"added user {ROOT}")
    if ROOT not in gateway.call("user/get", {"name": ROOT}).get("roles", []):
        gateway.call("user/grant", {"user": ROOT, "role": ROOT})
        changes.append(f"granted role {ROOT} to user {ROOT}")
    if spec.user not in roles and _add(gateway, "role/add", {"name": spec.user}):
        changes.append(f"added role {spec.user}")
    perm = spec.permission()
    if perm not in gateway.call("role/get", {"role": spec.user}).get("perm", []):
        gateway.call("role/grant", {"name": spec.user, "perm": perm})
        changes.append(f"granted READWRITE on {spec.prefix}/ to role {spec.user}")
    if spec.user not in users and _add(
        gateway, "user/add", {"name": spec.user, "password": spec.user_password}
    ):
        changes.append(f"added user {spec.user}")
    if spec.user not in gateway.call("user/get", {"name": spec.user}).get("roles", []):
        gateway.call("user/grant", {"user": spec.user, "role": spec.user})
        changes.append(f"granted role {spec.user} to user {spec.user}")
    if not enabled:
        gateway.call("enable", {})
        changes.append("enabled authentication")
    gateway.token = ""
    _login(gateway, ROOT, spec.root_password, "the root password file")
    _login(gateway, spec.user, spec.user_password, "the user password file")
    return changes


def turn_on(
    endpoints: Sequence[str], spec: AuthSpec, *, timeout_s: float = 10.0, wait_s: float = 0.0
) -> list[str]:
    """Set etcd up as :class:`AuthSpec` says; the changes made (none: it already was).

    While no endpoint answers, retries for up to ``wait_s`` seconds (0: one round).
    """
    for attempt in Retrying(
        stop=stop_after_delay(wait_s),
        wait=wait_exponential(multiplier=0.5, max=RETRY_MAX_PAUSE_S),
        retry=retry_if_exception_type(EtcdUnreachable),
        reraise=True,
    ):
        with attempt:
            return _apply(_Gateway(endpoints, timeout_s), spec)
    raise AssertionError("unreachable: tenacity re-raises the last failure")


@click.command("etcd-auth")
@click.option(
    "--endpoints",
    required=True,
    metavar="HOST:PORT[,...]",
    help="etcd client endpoints (plaintext), tried in turn.",
)
@click.option(
    "--root-password-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="File whose first line is root's password.",
)
@click.option("--user", required=True, help="The HA services' etcd user (and role).")
@click.option(
    "--user-password-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="File whose first line is that user's password.",
)
@click.option(
    "--prefix",
    default=DEFAULT_PREFIX,
    show_default=True,
    help="The HA controller's controller_prefix: the user may use the keys under PREFIX/.",
)
@click.option(
    "--wait",
    "wait_s",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 3600),
    help="Seconds to keep trying while no endpoint answers.",
)
@click.option("--timeout", "timeout_s", default=10.0, type=click.FloatRange(0.1, 300))
def etcd_auth(
    endpoints: str,
    root_password_file: Path,
    user: str,
    user_password_file: Path,
    prefix: str,
    wait_s: float,
    timeout_s: float,
) -> None:
    """Turn etcd's authentication on for the HA controller (idempotent)."""
    try:
        spec = AuthSpec(
            read_password_file(root_password_file, "--root-password-file"),
            user,
            read_password_file(user_password_file, "--user-password-file"),
            prefix,
        )
        changes = turn_on(parse_endpoints(endpoints), spec, timeout_s=timeout_s, wait_s=wait_s)
    except EtcdAuthError as exc:
        raise fail(exc) from None
    for change in changes:
        click.echo(change)
    click.echo(
        f"etcd authentication is on; {user} may read and write {prefix}/"
        + ("" if changes else " (nothing changed)")
    )
