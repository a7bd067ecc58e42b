"""AclAdmin: the GetAcl / UpdateAcl calls over the broker's :class:`AclTable`.

GetAcl never returns a secret key (masked as ``******``). UpdateAcl applies
one change: upsert an account, delete one, or replace every account with a
whole document's (``boltmq admin acl import``). While access control is
enforced, a change that would leave no admin account is refused: nobody
could edit the ACL again without the store's files.

While access control is off (``acl_enable`` false, the phase to prepare
accounts) no call is signed, so nothing tells an operator from anyone who
can reach the port: GetAcl and UpdateAcl are then answered only to a
loopback peer (``boltmq admin acl ... --broker-address 127.0.0.1:PORT`` on
the broker's host). GetMetadata then carries no ACL at all; while the ACL is
on it carries it only to the brokers' own account, sealed
(:meth:`AclAdmin.sealed_copy_for`, :mod:`acl_seal`). Otherwise an unsigned caller could read
the prepared accounts or plant an admin account that outlives turning the
ACL on. Requiring an admin identity from the first start was rejected: it
would make the ACL mandatory, and ``boltmq dev`` and the tests run without.
"""

from __future__ import annotations

import ipaddress
import json
import logging

from boltmq.v1 import broker_pb2
from services.broker.access.acl_file import Account, AclDocument, InvalidAcl
from services.broker.access.acl_seal import seal
from services.broker.access.acl_table import AclTable
from services.broker.access.gate import peer_host
from services.broker.errors import FailedPrecondition, InvalidArgument, PermissionDenied

log = logging.getLogger(__name__)


class AclAdmin:
    """Reads and edits the ACL for the servicer."""

    def __init__(self, table: AclTable, enforced: bool, brokers_access_key: str = "") -> None:
        self.table = table
        self.enforced = enforced
        self.brokers_access_key = brokers_access_key
        """The account brokers sign their own calls with (the ``access_key`` setting)."""

    def sealed_copy_for(self, caller: str) -> bytes | None:
        """The document sealed for ``caller`` (the account that signed a GetMetadata), or
        None unless the ACL is on and ``caller`` is the brokers' own account."""
        return self.sealed_for(caller, self.table.to_json())

    def sealed_for(self, caller: str, document: bytes) -> bytes | None:
        """``document`` sealed for ``caller`` under the rule of :meth:`sealed_copy_for`
        (the POP secret travels this way too)."""
        if not self.enforced or not caller or caller != self.brokers_access_key:
            return None
        account = self.table.document.accounts.get(caller)
        if account is None:
            return None
        return seal(document, account.access_key, account.secret_key)

    def shared_with(self, peer: str) -> bool:
        """True when ``peer`` (gRPC's ``context.peer()``) may be handed the ACL: access
        control is on (the gate checked the caller), or the peer is on this host."""
        return self.enforced or is_loopback_peer(peer)

    def require_local_while_off(self, peer: str) -> None:
        """PermissionDenied unless :meth:`shared_with` ``peer``."""
        if not self.shared_with(peer):
            raise PermissionDenied(
                "access control is off (acl_enable false): the ACL may only be read or "
                "changed from the broker's own host; run boltmq admin acl there with "
                "--broker-address 127.0.0.1:PORT, or turn acl_enable on and use an admin account"
            )

    def get(self, peer: str) -> broker_pb2.AclDocument:
        """The document in force, secrets masked."""
        self.require_local_while_off(peer)
        document = self.table.document
        return broker_pb2.AclDocument(
            json=document.dump(redact=True).decode(),
            version=document.version,
            enforced=self.enforced,
        )

    async def update(
        self, request: broker_pb2.UpdateAclRequest, peer: str
    ) -> broker_pb2.AclDocument:
        """Apply the request's change, save it, answer the new document (masked)."""
        self.require_local_while_off(peer)
        change = request.WhichOneof("change")
        try:
            if change == "upsert_account_json":
                account = Account.from_json(_json_object(request.upsert_account_json))
                await self.table.update(lambda d: self._checked(d.with_account(account)))
            elif change == "delete_access_key":
                key = request.delete_access_key
                await self.table.update(lambda d: self._checked(d.without_account(key)))
            elif change == "replace_json":
                new = AclDocument.parse(request.replace_json, "replace_json")
                await self.table.update(
                    lambda d: self._checked(d.replaced_by(new.accounts.values()))
                )
            else:
                raise InvalidArgument(
                    "change: give an account to upsert, an access key to "
                    "delete or a document to replace the ACL with"
                )
        except InvalidAcl as exc:
            raise InvalidArgument(str(exc)) from None
        log.info(
            "ACL %s: version %d, %d accounts",
            change,
            self.table.document.version,
            len(self.table.document.accounts),
        )
        return self.get(peer)

    def _checked(self, document: AclDocument) -> AclDocument:
        if self.enforced and not any(a.admin for a in document.accounts.values()):
            raise FailedPrecondition("access control is on: keep at least one admin account")
        return document


def is_loopback_peer(peer: str) -> bool:
    """True for ``ipv4:127.x.x.x:port`` and ``ipv6:[::1]:port`` (gRPC's peer strings)."""
    try:
        ip = ipaddress.ip_address(peer_host(peer).strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _json_object(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidAcl(f"account is not valid JSON: {exc}") from None
