"""RoleState and RoleFile: whether a store is a master or a replica, and its master epochs.

How epochs, promotion and demotion serve HA: ``docs/ha.md``.

The role starts as the config's ``broker_role`` and changes only through
:meth:`RoleState.promote` / :meth:`RoleState.demote` (the SetRole RPC), so
the change must survive a restart: it is kept in ``<root>/ha/role.json``,
written like the broker's config files (tmp, fsync, rename, fsync dir, with a
``.bak``; see :mod:`services.store.config_files`).

``role.json`` (UTF-8 JSON):

Field        | Type            | Meaning
-------------+-----------------+------------------------------------------------
version      | int             | ROLE_FILE_VERSION
broker_role  | str             | ASYNC_MASTER, SYNC_MASTER or SLAVE, as the store runs now
epoch        | int             | the master epoch the store's last record belongs to
epochs       | [[int, int]...] | (epoch, CommitLog start offset) of every epoch known, oldest first
broker_id    | int             | the id the store's broker registers with; -1: its own config's

Epochs are how a rejoining old master learns which tail to drop: every
promotion starts a new epoch at the promoted store's CommitLog end, and a
replica of an older epoch that holds bytes past the start of the next epoch
holds bytes no master of that next epoch ever had.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from services.store.config_files import ConfigCorrupt, ConfigFiles

ROLE_DIR_NAME: Final = "ha"
ROLE_FILE_NAME: Final = "role.json"
ROLE_FILE_VERSION: Final = 1
MASTER_ROLES: Final = ("ASYNC_MASTER", "SYNC_MASTER")
REPLICA_ROLE: Final = "SLAVE"
EPOCH_MAX: Final = (1 << 63) - 1
"""The largest epoch: StoreInfo and role.json hold epochs as int64."""


class RoleChangeRefused(ValueError):
    """A promotion or demotion that would break the epoch order or the role rules."""


@dataclass
class RoleState:
    """The store's current role, epoch history and broker id."""

    broker_role: str
    epoch: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)
    broker_id: int = -1

    @property
    def is_master(self) -> bool:
        return self.broker_role in MASTER_ROLES

    @property
    def sync_master(self) -> bool:
        return self.broker_role == "SYNC_MASTER"

    def promote(self, master_role: str, epoch: int, start_offset: int) -> None:
        """Become a master of ``epoch`` (0: the next one) starting at ``start_offset``."""
        if master_role not in MASTER_ROLES:
            raise RoleChangeRefused(f"{master_role!r} is not a master role {MASTER_ROLES}")
        new_epoch = epoch or self.epoch + 1
        if new_epoch > EPOCH_MAX:  # the wire and role.json carry it as an int64
            raise RoleChangeRefused(
                f"epoch {new_epoch} does not fit an int64: the store's "
                f"epoch {self.epoch} is the last one"
            )
        if new_epoch <= self.epoch:
            raise RoleChangeRefused(
                f"epoch {new_epoch} is not newer than the store's epoch {self.epoch}"
            )
        self.broker_role = master_role
        self.epoch = new_epoch
        self.epochs = [
            *[(e, s) for e, s in self.epochs if s <= start_offset],
            (new_epoch, start_offset),
        ]
        self.broker_id = 0

    def demote(self, epoch: int, epochs: list[tuple[int, int]], broker_id: int) -> None:
        """Follow a master of ``epoch`` (0: keep), adopting its history when given."""
        if epoch and epoch < self.epoch:
            raise RoleChangeRefused(
                f"master epoch {epoch} is older than the store's epoch {self.epoch}"
            )
        self.broker_role = REPLICA_ROLE
        if epochs:
            self.epochs = sorted(epochs)
        if epoch:
            self.epoch = epoch
        if broker_id >= 0:
            self.broker_id = broker_id

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": ROLE_FILE_VERSION,
                "broker_role": self.broker_role,
                "epoch": self.epoch,
                "epochs": [list(e) for e in self.epochs],
                "broker_id": self.broker_id,
            },
            indent=1,
        ).encode()


def _parse(content: bytes) -> RoleState:
    doc = json.loads(content)
    if not isinstance(doc, dict) or doc.get("version") != ROLE_FILE_VERSION:
        raise ValueError(f"not a version {ROLE_FILE_VERSION} role file")
    role = doc["broker_role"]
    if role not in (*MASTER_ROLES, REPLICA_ROLE):
        raise ValueError(f"unknown broker_role {role!r}")
    epochs = [(int(e), int(s)) for e, s in doc["epochs"]]
    return RoleState(role, int(doc["epoch"]), epochs, int(doc["broker_id"]))


class RoleFile:
    """``<root>/ha/role.json``: load at start, save after every change."""

    def __init__(self, root_dir: Path) -> None:
        self._files = ConfigFiles(root_dir, ROLE_DIR_NAME)

    def load(self, configured_role: str) -> tuple[RoleState, str]:
        """The saved state, or a fresh one for ``configured_role``; and a note on problems."""
        fresh = RoleState(configured_role, 0, [(0, 0)] if configured_role in MASTER_ROLES else [])
        try:
            content = self._files.get(ROLE_FILE_NAME)
        except ConfigCorrupt as exc:
            return fresh, f"role file unusable ({exc}); starting as configured {configured_role}"
        if content is None:
            return fresh, ""
        try:
            return _parse(content), ""
        except (ValueError, KeyError, TypeError) as exc:
            return fresh, (f"role file unusable ({exc}); starting as configured {configured_role}")

    def save(self, state: RoleState) -> None:
        """Write ``state`` durably (blocks on fsync: call it off the event loop)."""
        self._files.put(ROLE_FILE_NAME, state.to_json())
