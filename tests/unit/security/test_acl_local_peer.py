"""Who may read and edit the ACL while access control is off (services.broker.access.acl_admin)."""

from __future__ import annotations

import pytest

from services.broker.access.acl_admin import AclAdmin, is_loopback_peer
from services.broker.access.acl_table import AclTable
from services.broker.errors import PermissionDenied


@pytest.mark.parametrize(
    ("peer", "local"),
    [
        ("ipv4:127.0.0.1:50000", True),
        ("ipv4:127.10.0.1:50000", True),
        ("ipv6:[::1]:50000", True),
        ("ipv6:[::ffff:127.0.0.1]:50000", True),
        ("ipv4:192.0.2.2:50000", False),
        ("ipv6:[fd00::2]:50000", False),
        ("ipv6:[::ffff:192.0.2.2]:50000", False),
        ("unix:/tmp/socket", False),
        ("ipv4:not-an-ip:1", False),
        ("", False),
    ],
)
def test_loopback_peers(peer: str, local: bool) -> None:
    assert is_loopback_peer(peer) is local


def test_off_only_local_callers_on_every_checked_caller() -> None:
    table = AclTable(store=None)  # type: ignore[arg-type]  # never touched by these reads
    off = AclAdmin(table, enforced=False)
    assert off.get("ipv4:127.0.0.1:1").enforced is False
    assert not off.shared_with("ipv4:192.0.2.2:1")
    with pytest.raises(PermissionDenied, match="access control is off"):
        off.get("ipv4:192.0.2.2:1")
    on = AclAdmin(table, enforced=True)
    assert on.shared_with("ipv4:192.0.2.2:1")  # the gate authenticated an admin account
    assert on.get("ipv4:192.0.2.2:1").enforced
