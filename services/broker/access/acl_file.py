"""The ACL document: accounts and their permissions (RocketMQ's plain_acl.yml, as JSON).

The broker keeps it in the store as ``plain_acl.json`` (GetConfig/PutConfig,
like topics.json: :mod:`services.broker.metadata.persister`), seeds it from
``acl_file`` when the store has none, and edits it through the admin-only
``GetAcl`` / ``UpdateAcl`` calls (``boltmq admin acl ...``). The same JSON is
the seed file's format::

    {
      "version": 3,
      "accounts": [
        {"accessKey": "admin-key", "secretKey": "...", "admin": true},
        {"accessKey": "orders-app", "secretKey": "...",
         "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
         "topicPerms": {"orders": "PUB|SUB", "audit": "PUB"},
         "groupPerms": {"billing": "SUB", "orders-tx": "PUB"}}
      ]
    }

Field             | Type              | Meaning
------------------+-------------------+--------------------------------------------------
version           | int >= 0          | bumped by every edit (optional in a seed file)
accounts          | list              | at most ``ACCOUNTS_MAX``; access keys unique
accessKey         | string            | 6-128 of ``A-Z a-z 0-9 _ . -``
secretKey         | string            | 6-256 printable ASCII, no spaces
admin             | bool (false)      | may do everything, admin calls included
defaultTopicPerm  | perm ("DENY")     | on topics not named in topicPerms
defaultGroupPerm  | perm ("DENY")     | on groups not named in groupPerms
topicPerms        | {topic: perm}     | per-topic permissions
groupPerms        | {group: perm}     | per-group permissions: SUB consumes as a
                  |                   | consumer group, PUB is a transactional
                  |                   | producer group

A perm is ``DENY``, ``PUB``, ``SUB`` or ``PUB|SUB`` (``SUB|PUB`` too). As in
RocketMQ, DENY wins over everything, and a named topic or group replaces the
default rather than adding to it. Unknown fields are refused, so a typo
("topicPerm") never silently grants the defaults. Groups default to DENY: a
group is an identity (its offsets, retries, dead letters, transactions), so
an account gets only the groups named for it. Documents written before this
default (every account's ``defaultGroupPerm`` spelled out as ``SUB``) keep
what they say; the broker warns about such accounts at start
(:func:`wide_group_defaults`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from boltmq.kernel.signing import SigningError, check_access_key, check_secret_key

ACL_FILE = "plain_acl.json"
"""Name of the document in the store's config directory."""
ACCOUNTS_MAX = 10_000
PERMS_PER_ACCOUNT_MAX = 10_000
NAME_MAX_CHARS = 255
REDACTED_SECRET = "******"
"""What GetAcl shows instead of a secret key."""
_ACCOUNT_FIELDS = frozenset(
    {
        "accessKey",
        "secretKey",
        "admin",
        "defaultTopicPerm",
        "defaultGroupPerm",
        "topicPerms",
        "groupPerms",
    }
)


class InvalidAcl(ValueError):
    """An ACL document or account that is not what this module describes."""


class Perm(enum.IntFlag):
    """Rights on a topic or group (RocketMQ's Permission bits)."""

    DENY = 1
    PUB = 2
    SUB = 4

    @classmethod
    def parse(cls, text: Any, where: str) -> Perm:
        """``"PUB|SUB"`` -> Perm; InvalidAcl naming ``where`` for anything else."""
        if not isinstance(text, str) or not text:
            raise InvalidAcl(f"{where}: a permission is DENY, PUB, SUB or PUB|SUB")
        perm = cls(0)
        for part in text.upper().split("|"):
            if part.strip() not in cls.__members__:
                raise InvalidAcl(
                    f"{where}: unknown permission {part.strip()!r} (DENY, PUB, SUB or PUB|SUB)"
                )
            perm |= cls[part.strip()]
        if Perm.DENY in perm and perm != Perm.DENY:
            raise InvalidAcl(f"{where}: DENY cannot be combined with PUB or SUB")
        return perm

    def text(self) -> str:
        """The document's spelling: ``DENY``, ``PUB``, ``SUB`` or ``PUB|SUB``."""
        return "|".join(p.name for p in (Perm.DENY, Perm.PUB, Perm.SUB) if p in self and p.name)

    def grants(self, needed: Perm) -> bool:
        """True when these rights cover ``needed`` (DENY covers nothing)."""
        return Perm.DENY not in self and (self & needed) == needed


@dataclass(frozen=True)
class Account:
    """One access key's secret and rights."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)

    def topic_perm(self, topic: str) -> Perm:
        """Rights on ``topic``: its own entry, else the default."""
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> Perm:
        """Rights on group ``group``: its own entry, else the default."""
        return self.group_perms.get(group, self.default_group_perm)

    @classmethod
    def from_json(cls, item: Any, where: str = "account") -> Account:
        """An account from its JSON object; InvalidAcl naming the field otherwise."""
        if not isinstance(item, dict):
            raise InvalidAcl(f"{where} is not a JSON object")
        unknown = set(item) - _ACCOUNT_FIELDS
        if unknown:
            raise InvalidAcl(f"{where}: unknown fields {sorted(unknown)}")
        try:
            access_key = check_access_key(item.get("accessKey", ""))
            where = f"account {access_key}"
            secret_key = check_secret_key(item.get("secretKey", ""))
        except SigningError as exc:
            raise InvalidAcl(f"{where}: {exc}") from None
        admin = item.get("admin", False)
        if not isinstance(admin, bool):
            raise InvalidAcl(f"{where}: admin must be true or false")
        return cls(
            access_key,
            secret_key,
            admin,
            Perm.parse(item.get("defaultTopicPerm", "DENY"), f"{where} defaultTopicPerm"),
            Perm.parse(item.get("defaultGroupPerm", "DENY"), f"{where} defaultGroupPerm"),
            _perm_map(item.get("topicPerms", {}), f"{where} topicPerms"),
            _perm_map(item.get("groupPerms", {}), f"{where} groupPerms"),
        )

    def to_json(self, *, redact: bool = False) -> dict[str, Any]:
        """The account's JSON object (secret replaced by ``REDACTED_SECRET`` when asked)."""
        return {
            "accessKey": self.access_key,
            "secretKey": REDACTED_SECRET if redact else self.secret_key,
            "admin": self.admin,
            "defaultTopicPerm": self.default_topic_perm.text(),
            "defaultGroupPerm": self.default_group_perm.text(),
            "topicPerms": {k: v.text() for k, v in sorted(self.topic_perms.items())},
            "groupPerms": {k: v.text() for k, v in sorted(self.group_perms.items())},
        }


def _perm_map(value: Any, where: str) -> dict[str, Perm]:
    if not isinstance(value, dict):
        raise InvalidAcl(f"{where} must be an object of name -> permission")
    if len(value) > PERMS_PER_ACCOUNT_MAX:
        raise InvalidAcl(f"{where}: more than {PERMS_PER_ACCOUNT_MAX} entries")
    perms = {}
    for name, text in value.items():
        if not name or len(name) > NAME_MAX_CHARS:
            raise InvalidAcl(f"{where}: names are 1-{NAME_MAX_CHARS} characters")
        perms[name] = Perm.parse(text, f"{where} {name}")
    return perms


@dataclass(frozen=True)
class AclDocument:
    """Every account, by access key, and the document's version."""

    accounts: Mapping[str, Account] = field(default_factory=dict)
    version: int = 0

    @classmethod
    def parse(cls, data: bytes | str, where: str = ACL_FILE) -> AclDocument:
        """Decode and check a whole document; InvalidAcl naming ``where`` and the field."""
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidAcl(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(document, dict) or set(document) - {"version", "accounts"}:
            raise InvalidAcl(f"{where} must be an object with 'version' and 'accounts' only")
        version = document.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InvalidAcl(f"{where}: version must be a non-negative integer")
        items = document.get("accounts", [])
        if not isinstance(items, list) or len(items) > ACCOUNTS_MAX:
            raise InvalidAcl(f"{where}: accounts must be a list of at most {ACCOUNTS_MAX}")
        accounts: dict[str, Account] = {}
        for index, item in enumerate(items):
            account = Account.from_json(item, f"{where} account #{index}")
            if account.access_key in accounts:
                raise InvalidAcl(f"{where}: access key {account.access_key} appears twice")
            accounts[account.access_key] = account
        return cls(accounts, version)

    def dump(self, *, redact: bool = False) -> bytes:
        """The document as JSON (sorted by access key)."""
        return json.dumps(
            {
                "version": self.version,
                "accounts": [a.to_json(redact=redact) for _, a in sorted(self.accounts.items())],
            },
            indent=1,
            sort_keys=True,
        ).encode()

    def with_account(self, account: Account) -> AclDocument:
        """A copy with ``account`` added or replaced, version bumped."""
        if account.access_key not in self.accounts and len(self.accounts) >= ACCOUNTS_MAX:
            raise InvalidAcl(f"at most {ACCOUNTS_MAX} accounts")
        return replace(
            self, accounts={**self.accounts, account.access_key: account}, version=self.version + 1
        )

    def without_account(self, access_key: str) -> AclDocument:
        """A copy without ``access_key`` (InvalidAcl when absent), version bumped."""
        if access_key not in self.accounts:
            raise InvalidAcl(f"no account {access_key!r}")
        return replace(
            self,
            accounts={k: v for k, v in self.accounts.items() if k != access_key},
            version=self.version + 1,
        )

    def replaced_by(self, accounts: Iterable[Account]) -> AclDocument:
        """A copy holding exactly ``accounts``, version bumped past this one's."""
        return AclDocument({a.access_key: a for a in accounts}, self.version + 1)


def wide_group_defaults(document: AclDocument) -> list[str]:
    """Access keys of the accounts (admins aside) that may use every group not named in
    their ``groupPerms``: another application's offsets, retries and dead letters."""
    return sorted(
        a.access_key
        for a in document.accounts.values()
        if not a.admin and Perm.DENY not in a.default_group_perm and a.default_group_perm
    )
