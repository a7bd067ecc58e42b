"""``boltmq admin acl``: read and edit the brokers' access control lists.

Every command goes to every master broker of the cluster (or the one named
with ``--broker``): each broker group keeps its own ACL in its store, and
its replicas copy it. The broker checks every change (field names, access
key and secret rules, permissions), so the CLI builds the JSON and reports
the broker's answer; with access control on, only an admin account may call
these (``--access-key`` / ``BOLTMQ_ACCESS_KEY``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from boltmq.cli.admin import Admin, _with_admin, admin
from boltmq.cli.messages import fail
from boltmq.v1 import broker_pb2


@admin.group("acl")
def acl() -> None:
    """Accounts and permissions of access control (docs/security.md)."""


def _perm_pairs(option: str, items: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, perm = item.partition("=")
        if not sep or not name or not perm:
            raise fail(
                f"{option} expects NAME=PERM (PERM: DENY, PUB, SUB or PUB|SUB), got {item!r}"
            )
        pairs[name] = perm.upper()
    return pairs


def _report(results: list[tuple[str, broker_pb2.AclDocument]], verb: str) -> None:
    for broker_name, document in results:
        accounts = len(json.loads(document.json).get("accounts", []))
        state = "enforced" if document.enforced else "not enforced (acl_enable off)"
        click.echo(
            f"{broker_name}: {verb}; version {document.version}, {accounts} account(s), {state}"
        )


@acl.command("show")
@_with_admin
def show(admin_: Admin) -> None:
    """Print each master broker's ACL (secret keys masked)."""
    for broker_name, document in admin_.each_master("GetAcl", broker_pb2.GetAclRequest()):
        state = "enforced" if document.enforced else "not enforced"
        click.echo(f"# {broker_name}: version {document.version}, {state}")
        click.echo(document.json)


@acl.command("set-account")
@click.argument("account_key", metavar="ACCESS_KEY")
@click.option(
    "--account-secret",
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    envvar="BOLTMQ_ACCOUNT_SECRET",
    show_envvar=True,
    help="The account's secret key (asked for when not given).",
)
@click.option("--admin", "is_admin", is_flag=True, help="May do everything, admin calls too.")
@click.option(
    "--default-topic-perm",
    default="DENY",
    show_default=True,
    help="Rights on topics not listed with --topic.",
)
@click.option(
    "--default-group-perm",
    default="DENY",
    show_default=True,
    help="Rights on groups not listed with --group.",
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="NAME=PERM",
    help="Rights on one topic (repeatable), e.g. orders=PUB|SUB.",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    metavar="NAME=PERM",
    help="Rights on one group (repeatable): billing=SUB consumes as consumer group "
    "billing, orders-tx=PUB is transactional producer group orders-tx.",
)
@_with_admin
def set_account(
    admin_: Admin,
    account_key: str,
    account_secret: str,
    is_admin: bool,
    default_topic_perm: str,
    default_group_perm: str,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
) -> None:
    """Add the account ACCESS_KEY, or replace it (its secret and every right)."""
    account = {
        "accessKey": account_key,
        "secretKey": account_secret,
        "admin": is_admin,
        "defaultTopicPerm": default_topic_perm.upper(),
        "defaultGroupPerm": default_group_perm.upper(),
        "topicPerms": _perm_pairs("--topic", topics),
        "groupPerms": _perm_pairs("--group", groups),
    }
    request = broker_pb2.UpdateAclRequest(upsert_account_json=json.dumps(account))
    _report(admin_.each_master("UpdateAcl", request), f"account {account_key} set")


@acl.command("delete-account")
@click.argument("account_key", metavar="ACCESS_KEY")
@_with_admin
def delete_account(admin_: Admin, account_key: str) -> None:
    """Remove the account ACCESS_KEY (its calls are refused from now on)."""
    request = broker_pb2.UpdateAclRequest(delete_access_key=account_key)
    _report(admin_.each_master("UpdateAcl", request), f"account {account_key} deleted")


@acl.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_with_admin
def import_file(admin_: Admin, file: Path) -> None:
    """Replace every account with those of FILE (the ACL JSON format; key rotation)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {file}: {exc}") from None
    request = broker_pb2.UpdateAclRequest(replace_json=text)
    _report(admin_.each_master("UpdateAcl", request), f"accounts replaced from {file}")
