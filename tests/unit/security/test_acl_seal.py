"""The ACL document sealed for the brokers' own account (services.broker.access.acl_seal)."""

from __future__ import annotations

import pytest

from services.broker.access.acl_admin import AclAdmin
from services.broker.access.acl_file import Account, AclDocument
from services.broker.access.acl_seal import UnsealFailed, seal, unseal
from services.broker.access.acl_table import AclTable

DOCUMENT = b'{"accounts": [{"accessKey": "orders-app", "secretKey": "orders-secret-1"}]}'


def test_only_the_account_it_was_sealed_for_opens_it() -> None:
    sealed = seal(DOCUMENT, "broker-key", "broker-secret-1")
    assert b"orders-secret-1" not in sealed
    assert unseal(sealed, "broker-key", "broker-secret-1") == DOCUMENT
    assert seal(DOCUMENT, "broker-key", "broker-secret-1") != sealed  # a fresh nonce each time
    for key, secret in (("broker-key", "other-secret"), ("other-key", "broker-secret-1")):
        with pytest.raises(UnsealFailed, match="not sealed for access key"):
            unseal(sealed, key, secret)
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(UnsealFailed):
        unseal(tampered, "broker-key", "broker-secret-1")
    with pytest.raises(UnsealFailed, match="not a sealed ACL document"):
        unseal(DOCUMENT, "broker-key", "broker-secret-1")


def test_the_copy_goes_to_the_brokers_account_only_while_enforced() -> None:
    table = AclTable(store=None)  # type: ignore[arg-type]  # never touched here
    table.document = AclDocument().with_account(
        Account.from_json(
            {"accessKey": "broker-key", "secretKey": "broker-secret-1", "admin": True}
        )
    )
    on = AclAdmin(table, enforced=True, brokers_access_key="broker-key")
    sealed = on.sealed_copy_for("broker-key")
    assert sealed is not None and b"broker-secret-1" in unseal(
        sealed, "broker-key", "broker-secret-1"
    )
    assert on.sealed_copy_for("ops-admin") is None
    assert on.sealed_copy_for("") is None
    assert (
        AclAdmin(table, enforced=False, brokers_access_key="broker-key").sealed_copy_for(
            "broker-key"
        )
        is None
    )
    assert AclAdmin(table, enforced=True).sealed_copy_for("broker-key") is None
