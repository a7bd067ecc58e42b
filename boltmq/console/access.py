"""The Access page: ACL accounts and their rights (admin accounts only).

Reads ``GetAcl`` (secrets come masked from the broker, and the console drops the
field anyway: a secret is typed once, when an account is created or replaced,
and never shown again), and changes every master's ACL as ``boltmq admin acl``
does (``UpdateAcl``: upsert one account, delete one). The broker checks every
field; its refusal is shown as it words it.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from boltmq.console.calls import ClusterCalls, ConsoleError, denied, error_text
from boltmq.v1 import broker_pb2

PERMS = ("DENY", "PUB", "SUB", "PUB|SUB")


def accounts(calls: ClusterCalls) -> dict[str, Any]:
    """The first master's accounts without secrets, and each master's version."""
    answers = calls.each("GetAcl", broker_pb2.GetAclRequest())
    versions = []
    shown: list[dict[str, Any]] = []
    for broker, answer in answers:
        if isinstance(answer, grpc.RpcError):
            if denied(answer):
                raise ConsoleError("accounts and rights: an admin account only")
            raise ConsoleError(f"GetAcl on {broker.broker_name}: {error_text(answer)}")
        versions.append((broker.broker_name, answer.version, answer.enforced))
        if not shown:
            document = json.loads(answer.json or "{}")
            for account in document.get("accounts", []):
                account.pop("secretKey", None)
                shown.append(account)
    return {"accounts": sorted(shown, key=lambda a: a.get("accessKey", "")), "versions": versions}


def _pairs(text: str, what: str) -> dict[str, str]:
    """``name=PERM`` lines (or comma separated) as a dict; ConsoleError naming a bad one."""
    pairs = {}
    for item in text.replace(",", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        name, sep, perm = item.partition("=")
        perm = perm.strip().upper()
        if not sep or not name.strip() or perm not in PERMS:
            raise ConsoleError(f"{what}: NAME=PERM (PERM: {', '.join(PERMS)}), not {item!r}")
        pairs[name.strip()] = perm
    return pairs


def set_account(
    calls: ClusterCalls,
    access_key: str,
    secret_key: str,
    admin: bool,
    default_topic_perm: str,
    default_group_perm: str,
    topic_perms: str,
    group_perms: str,
) -> list[str]:
    """Add or replace one account on every master."""
    for what, perm in (("default topic right", default_topic_perm),
                       ("default group right", default_group_perm)):  # fmt: skip
        if perm.upper() not in PERMS:
            raise ConsoleError(f"{what}: one of {', '.join(PERMS)}, not {perm!r}")
    account = {
        "accessKey": access_key.strip(),
        "secretKey": secret_key,
        "admin": admin,
        "defaultTopicPerm": default_topic_perm.upper(),
        "defaultGroupPerm": default_group_perm.upper(),
        "topicPerms": _pairs(topic_perms, "topic rights"),
        "groupPerms": _pairs(group_perms, "group rights"),
    }
    request = broker_pb2.UpdateAclRequest(upsert_account_json=json.dumps(account))
    return [
        f"{broker}: account {account['accessKey']} set (version {document.version})"
        for broker, document in calls.each_ok("UpdateAcl", request)
    ]


def delete_account(calls: ClusterCalls, access_key: str) -> list[str]:
    request = broker_pb2.UpdateAclRequest(delete_access_key=access_key.strip())
    return [
        f"{broker}: account {access_key} deleted (version {document.version})"
        for broker, document in calls.each_ok("UpdateAcl", request)
    ]
