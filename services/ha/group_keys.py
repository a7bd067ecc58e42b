"""GroupKeys: one broker group's keys in etcd, the controller's only state (docs/ha.md).

The controller (:mod:`services.ha.controller`) elects a group's master through
etcd's v3 API (the ``aetcd`` client, gRPC); every call is here, with a
deadline, and every failure is a :class:`~services.ha.errors.ControllerUnavailable`.
With several endpoints, a failed call moves the next one to the next endpoint. Calls
may run at once (the lease renewals beside a step): a failed call closes the
connection, which cuts the others off, and each of those fails the same way.

Keys, under ``<prefix>/<cluster>/<group>/`` (values UTF-8 JSON):

========== ======= ============================================================
key        lease   value
========== ======= ============================================================
master     master  ``{"ha_address", "store_address", "epoch"}``: the elected
                   master; it disappears with its lease (expiry or revocation)
epoch      none    ``{"epoch", "ha_address"}``: the last elected epoch (the
                   fencing token: each election takes the next one) and who won it
confirmed  none    ``{"offset"}``: a CommitLog offset every acknowledged append
                   of the group ends at or before; only a store holding this much
                   may be elected (absent until the first election)
members/A  member  ``{"end"}``: the CommitLog end of the store beside HA service
                   ``A``, as it last announced it; gone with the service's lease
========== ======= ============================================================

Each controller holds one lease (its session); ``master`` and its ``members/``
key are attached to it.

An election is one transaction: *if* ``master`` does not exist *and*
``epoch`` is unchanged since it was read, *then* put ``master`` with the
candidate's lease, ``epoch`` + 1 and (the first time) ``confirmed``. Two
candidates cannot both win, nor win the same epoch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import aetcd
from aetcd.utils import prefix_range_end

from services.ha.errors import ControllerUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MasterRecord:
    """The ``master`` key: who leads the group, in which epoch, under which lease."""

    ha_address: str
    store_address: str
    epoch: int
    lease_id: int = 0

    def to_json(self) -> bytes:
        doc = {"ha_address": self.ha_address, "store_address": self.store_address}
        return json.dumps({**doc, "epoch": self.epoch}).encode()


@dataclass(frozen=True)
class GroupState:
    """The group's keys as read in one transaction."""

    master: MasterRecord | None
    epoch: int
    """The last elected epoch (0: no election yet)."""
    epoch_revision: int
    """Modification revision of the ``epoch`` key (0: absent); the election compares it."""
    last_master: str
    """HA address of the last elected master ("" before the first election)."""
    confirmed: int | None
    """Offset every acknowledged append ends at or before; None before the first election."""
    members: dict[str, int]
    """HA address -> announced CommitLog end of every member whose lease is alive."""


def _doc(value: bytes) -> dict[str, Any]:
    doc = json.loads(value)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


class GroupKeys:
    """etcd calls of one group's controller; ``timeout_s`` bounds each call."""

    def __init__(
        self,
        endpoints: tuple[str, ...],
        prefix: str,
        cluster_name: str,
        broker_name: str,
        timeout_s: float,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self._endpoints = endpoints
        self._credentials = credentials
        """(user, password) where etcd's authentication is on."""
        self._next = 0
        self._timeout_s = timeout_s
        base = f"{prefix}/{cluster_name}/{broker_name}/"
        self.master_key = (base + "master").encode()
        self.epoch_key = (base + "epoch").encode()
        self.confirmed_key = (base + "confirmed").encode()
        self.members_prefix = (base + "members/").encode()
        self._client: aetcd.Client | None = None

    def _connected(self) -> aetcd.Client:
        if self._client is None:
            host, _, port = self._endpoints[self._next % len(self._endpoints)].rpartition(":")
            user, password = self._credentials or (None, None)
            self._client = aetcd.Client(
                host=host.strip("[]"), port=int(port), username=user, password=password
            )
        return self._client

    async def _run(self, what: str, call: Any) -> Any:
        """Await ``call(client)`` within the deadline; ControllerUnavailable on any failure."""
        client = self._connected()
        endpoint = self._endpoints[self._next % len(self._endpoints)]
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call(client)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this call's own caller is cancelled
            reason: object = "the connection was closed"  # by a call that failed beside it
        except (TimeoutError, aetcd.ClientError, OSError, ValueError) as exc:
            reason = type(exc).__name__ if isinstance(exc, TimeoutError) else exc
        if self._client is client:  # the first failure on a connection moves on
            self._next += 1
            await self._drop_client()
        raise ControllerUnavailable(f"etcd at {endpoint}: {what} failed: {reason}")

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await client.close()
            except Exception:  # closing a broken channel may fail in many ways
                log.debug("closing the etcd client failed", exc_info=True)

    async def close(self) -> None:
        """Close the connection (a lease held stays until it expires or is revoked)."""
        await self._drop_client()

    async def state(self) -> GroupState:
        """Read ``master``, ``epoch`` and ``confirmed`` at one revision."""

        async def read(client: aetcd.Client) -> Any:
            ops = client.transactions
            return await client.transaction(
                compare=[],
                success=[
                    ops.get(self.master_key),
                    ops.get(self.epoch_key),
                    ops.get(self.confirmed_key),
                    ops.get(self.members_prefix, prefix_range_end(self.members_prefix)),
                ],
                failure=[],
            )

        _, answers = await self._run("reading the group's keys", read)
        master_kv, epoch_kv, confirmed_kv = (a[0] if a else None for a in answers[:3])
        try:
            members = {
                meta.key[len(self.members_prefix) :].decode(): int(_doc(value)["end"])
                for value, meta in answers[3]
            }
            return self._parse(master_kv, epoch_kv, confirmed_kv, members)
        except (ValueError, KeyError, TypeError) as exc:
            raise ControllerUnavailable(f"etcd holds an unreadable group key: {exc}") from None

    @staticmethod
    def _parse(
        master_kv: Any, epoch_kv: Any, confirmed_kv: Any, members: dict[str, int]
    ) -> GroupState:
        master = None
        if master_kv is not None:
            value, meta = master_kv
            doc = _doc(value)
            master = MasterRecord(
                str(doc["ha_address"]), str(doc["store_address"]), int(doc["epoch"]), meta.lease
            )
        epoch, revision, last_master = 0, 0, ""
        if epoch_kv is not None:
            value, meta = epoch_kv
            doc = _doc(value)
            epoch, revision, last_master = int(doc["epoch"]), meta.mod_revision, doc["ha_address"]
        confirmed = None if confirmed_kv is None else int(_doc(confirmed_kv[0])["offset"])
        return GroupState(master, epoch, revision, str(last_master), confirmed, members)

    async def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; its id."""
        lease = await self._run("granting a lease", lambda c: c.lease(ttl_s))
        return int(lease.id)

    async def campaign(
        self, seen: GroupState, record: MasterRecord, lease_id: int, confirmed: int
    ) -> bool:
        """Take ``master`` for ``record`` (epoch ``seen.epoch`` + 1 expected in it) under
        ``lease_id``; ``confirmed`` is written when the key is absent. False: another won."""

        async def elect(client: aetcd.Client) -> Any:
            ops = client.transactions
            epoch_doc = {"epoch": record.epoch, "ha_address": record.ha_address}
            success = [
                ops.put(self.master_key, record.to_json(), lease=lease_id),
                ops.put(self.epoch_key, json.dumps(epoch_doc).encode()),
            ]
            if seen.confirmed is None:
                success.append(ops.put(self.confirmed_key, _offset_json(confirmed)))
            return await client.transaction(
                compare=[
                    ops.version(self.master_key) == 0,
                    ops.mod(self.epoch_key) == seen.epoch_revision,
                ],
                success=success,
                failure=[],
            )

        won, _ = await self._run("the election transaction", elect)
        return bool(won)

    async def keep_alive(self, lease_id: int) -> bool:
        """Refresh the lease; False when etcd no longer has it (it expired)."""
        answer = await self._run("renewing the lease", lambda c: c.refresh_lease(lease_id))
        return int(answer.TTL) > 0

    async def announce(self, ha_address: str, end: int, lease_id: int) -> None:
        """Put ``members/<ha_address>`` = the store's CommitLog ``end``, under ``lease_id``."""
        key = self.members_prefix + ha_address.encode()
        value = json.dumps({"end": end}).encode()
        await self._run("announcing the store's end", lambda c: c.put(key, value, lease=lease_id))

    async def publish_confirmed(self, offset: int) -> None:
        """Raise ``confirmed`` to ``offset`` (callers only ever raise it)."""
        await self._run(
            "publishing the confirmed offset",
            lambda c: c.put(self.confirmed_key, _offset_json(offset)),
        )

    async def revoke(self, lease_id: int) -> None:
        """Give the lease up now: ``master`` goes with it, another store may be elected."""
        await self._run("revoking the lease", lambda c: c.revoke_lease(lease_id))


def _offset_json(offset: int) -> bytes:
    return json.dumps({"offset": offset}).encode()
