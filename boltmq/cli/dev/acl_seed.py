"""``boltmq dev --acl``: the ACL seed of a local cluster, one admin account.

Files, in ``DATA_DIR/acl/`` (both mode 0600, written once: a later run on the same
data directory keeps them, as the store keeps the document it was seeded with):

- ``plain_acl.json``: the broker's seed (``acl_file``), in the ACL document's format
  (:mod:`services.broker.access.acl_file`):
  ``{"accounts": [{"accessKey": "dev-admin", "secretKey": "<secret>", "admin": true}]}``
- ``admin.secret``: that secret alone, for ``BOLTMQ_SECRET_KEY=$(cat ...)``, so it is
  never printed.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

ADMIN_ACCESS_KEY = "dev-admin"
SEED_FILE = "plain_acl.json"
SECRET_FILE = "admin.secret"


@dataclass(frozen=True)
class DevAcl:
    """Where a local cluster's ACL seed and its admin's secret are."""

    seed_file: Path
    secret_file: Path
    access_key: str = ADMIN_ACCESS_KEY

    def broker_settings(self) -> tuple[str, ...]:
        """The broker settings that turn the ACL on with this seed."""
        return ("acl_enable=true", f"acl_file={self.seed_file}")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def ensure(directory: Path) -> DevAcl:
    """The seed under ``directory``, written with a fresh random secret if missing."""
    acl = DevAcl(directory / SEED_FILE, directory / SECRET_FILE)
    if acl.seed_file.exists() and acl.secret_file.exists():
        return acl
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for stale in (acl.seed_file, acl.secret_file):
        stale.unlink(missing_ok=True)
    secret = secrets.token_urlsafe(24)
    account = {"accessKey": ADMIN_ACCESS_KEY, "secretKey": secret, "admin": True}
    _write_private(acl.secret_file, secret + "\n")
    _write_private(acl.seed_file, json.dumps({"accounts": [account]}, indent=2) + "\n")
    return acl
