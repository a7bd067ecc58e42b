"""AclAdmin: the GetAcl / UpdateAcl calls over the broker's :class:`AclTable`.

GetAcl never returns a secret key (masked as ``******``). UpdateAcl applies
one change: upsert an account, delete one, or replace every account with a
whole document's (``boltmq admin acl import``). While access control is
enforced, a change that would leave no admin account is refused: nobody
could edit the ACL again without the store's files.
"""

from __future__ import annotations

import json
import logging

from boltmq.v1 import broker_pb2
from services.broker.access.acl_file import Account, AclDocument, InvalidAcl
from services.broker.access.acl_table import AclTable
from services.broker.errors import FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)


class AclAdmin:
    """Reads and edits the ACL for the servicer."""

    def __init__(self, table: AclTable, enforced: bool) -> None:
        self.table = table
        self.enforced = enforced

    def get(self) -> broker_pb2.AclDocument:
        """The document in force, secrets masked."""
        document = self.table.document
        return broker_pb2.AclDocument(
            json=document.dump(redact=True).decode(),
            version=document.version,
            enforced=self.enforced,
        )

    async def update(self, request: broker_pb2.UpdateAclRequest) -> broker_pb2.AclDocument:
        """Apply the request's change, save it, answer the new document (masked)."""
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
        return self.get()

    def _checked(self, document: AclDocument) -> AclDocument:
        if self.enforced and not any(a.admin for a in document.accounts.values()):
            raise FailedPrecondition("access control is on: keep at least one admin account")
        return document


def _json_object(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidAcl(f"account is not valid JSON: {exc}") from None
