"""AclTable: the broker's current ACL document, kept in the store.

At start-up the broker reads ``plain_acl.json`` from its store. When the
store has none and ``acl_file`` names a seed file (a Kubernetes Secret, say),
the seed is checked and written to the store, so later edits
(``boltmq admin acl ...``) persist across restarts and the seed is not read
again. Overwriting the store's copy with the seed on every start was
rejected: it would silently undo every edit made since. Rotating the whole
document is ``boltmq admin acl import FILE``.

Edits are serialised by a lock and written to the store before they take
effect, so a broker never enforces a document its store does not hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from boltmq.kernel.config import ConfigError
from services.broker.access.acl_file import (
    ACL_FILE,
    AclDocument,
    InvalidAcl,
    wide_group_defaults,
)
from services.broker.errors import CorruptMetadata
from services.broker.store.store_client import StoreClient

log = logging.getLogger(__name__)

SEED_FILE_MAX_BYTES = 16 * 1024 * 1024
"""Largest seed file read (the store's limit for one config document)."""


def read_seed_file(path: str) -> AclDocument:
    """The ACL document in ``path``; ConfigError naming the file when it is unusable."""
    try:
        with open(Path(path).expanduser(), "rb") as file:
            data = file.read(SEED_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"acl_file: cannot read {path}: {exc.strerror}") from None
    if len(data) > SEED_FILE_MAX_BYTES:
        raise ConfigError(f"acl_file: {path} is larger than {SEED_FILE_MAX_BYTES} bytes")
    try:
        return AclDocument.parse(data, f"acl_file {path}")
    except InvalidAcl as exc:
        raise ConfigError(str(exc)) from None


class AclTable:
    """The document the broker enforces, loaded from and saved to the store."""

    def __init__(self, store: StoreClient, seed: AclDocument | None = None) -> None:
        self._store = store
        self._seed = seed
        self._lock = asyncio.Lock()
        self.document = AclDocument()
        """The document in force (empty until :meth:`load`)."""

    async def load(self) -> None:
        """Read the store's document; seed it when the store has none."""
        data = await self._store.get_config(ACL_FILE)
        if data is not None:
            self.load_json(data)
            if self._seed is not None:
                log.info(
                    "%s already in the store (version %d): acl_file not applied",
                    ACL_FILE,
                    self.document.version,
                )
        elif self._seed is not None:
            await self.update(lambda _: self._seed or AclDocument())
            log.info("ACL seeded from acl_file: %d accounts", len(self.document.accounts))
        wide = wide_group_defaults(self.document)
        if wide:
            log.warning(
                "ACL accounts %s may use every group not in their groupPerms "
                "(defaultGroupPerm is not DENY): other applications' offsets, retries "
                "and dead letters; name their groups and set defaultGroupPerm to DENY",
                ", ".join(wide[:20]) + (f" and {len(wide) - 20} more" if len(wide) > 20 else ""),
            )

    def load_json(self, data: bytes) -> None:
        """Take a document as stored (start-up, or a replica's copy of its master's)."""
        try:
            self.document = AclDocument.parse(data)
        except InvalidAcl as exc:
            raise CorruptMetadata(str(exc)) from None

    def to_json(self) -> bytes:
        """The document as stored (secrets included: for the group's replicas only)."""
        return self.document.dump()

    async def update(self, change: Callable[[AclDocument], AclDocument]) -> AclDocument:
        """Apply ``change`` to the current document, save it, then put it in force."""
        async with self._lock:
            changed = change(self.document)
            await self._store.put_config(ACL_FILE, changed.dump())
            self.document = changed
            return changed

    async def save_copy(self, data: bytes) -> None:
        """A replica's broker: take the master's document and keep it in its own store."""
        async with self._lock:
            self.load_json(data)
            await self._store.put_config(ACL_FILE, data)
