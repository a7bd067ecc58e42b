"""Transactions: half messages, their decision, and check-back (RocketMQ 4.x's design).

Chosen over a store-side index of prepared offsets, which would teach the
store about transactions (it knows records and queues, nothing the broker
builds from them) and need a new store RPC; here the broker keeps everything
in two system topics the store treats as any other (the records themselves
are built in :mod:`services.broker.transaction.half_message`):

- **Half message.** A SendMessage whose message has sys flag PREPARED (0x4) is
  stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC``,
  ``REAL_QID``, ``TRAN_MSG=true`` and ``PGROUP`` properties and the
  transaction bits cleared: readable through that consume queue (so undecided
  halves can be found again after a restart), never in the real topic's queue
  (never visible early). Its commitlog offset names the transaction.
- **Decision.** EndTransaction(COMMIT) appends a COMMIT record (sys flag 0x8)
  with the real topic, queue, body and properties and
  ``prepared_transaction_offset`` = the half's offset; the store's dispatcher
  puts COMMIT records in consume queues, so the message becomes visible then.
  ROLLBACK appends a ROLLBACK record (0xC, empty body) that no consume queue
  holds. Then an op record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (body: the
  half's offset, ``TRAN_OP`` COMMIT|ROLLBACK) marks the half decided; every
  check-back appends a ``TRAN_OP=CHECK`` op, so check counts survive restarts.
- **Exactly once.** Undecided halves are a table in memory. A decision takes
  the half out of it before its first await, so a repeated EndTransaction (a
  retry, or a check answer racing the first) finds it decided and writes
  nothing. The table is rebuilt from the two topics at start (and when the
  store becomes a master): ops first, then every half without a decision. The
  one crash window -- marker stored, op record lost -- is closed by looking
  for a marker through the index (real topic + UNIQ_KEY, then sys flag and
  prepared offset compared) before an undecided half re-enters the table.
- **Who decides.** A half is its producer group's (``PGROUP``): deciding it,
  and receiving its check-backs, takes that group (``producer_group``) and,
  with access control on, PUB on the group and on the half's real topic. Any
  other offset -- nothing there, another record, another group's half, a
  topic the caller may not publish to -- gets one NOT_FOUND that describes
  nothing of what is there (:func:`_no_half`).
- **Check-back.** Every ``transaction_check_interval_ms``, halves undecided
  for ``transaction_timeout_ms`` since their store time or last check are
  pushed to one open TransactionChecks stream of their group
  (:mod:`services.broker.transaction.check_channel`). A check counts only
  when a stream took it, so a producer restarting does not use checks up.
  After ``transaction_check_max`` checks the half is rolled back and logged;
  RocketMQ discards it instead, which leaves a late EndTransaction nothing to
  learn the outcome from.

Limits: start-up reads both system topics from their first offset (RocketMQ
keeps a progress offset); one broker process per store, since the table is
this process's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator

import grpc

from boltmq.kernel import runtime
from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.record import SYS_FLAG_TRANSACTION_MASK, SYS_FLAG_TRANSACTION_PREPARED
from services.broker.access.acl_file import Perm
from services.broker.access.caller import caller_may
from services.broker.access.resources import topic_need
from services.broker.config import BrokerConfig
from services.broker.errors import (
    BrokerError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StoreFailed,
)
from services.broker.metadata.clock import Clock, wall_clock_ms
from services.broker.metadata.names import check_group
from services.broker.metadata.topic_config import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole
from services.broker.transaction.check_channel import CheckChannels
from services.broker.transaction.half_message import (
    DECISION_OF_FLAG,
    PROPERTY_PGROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    Decision,
    Half,
    half_record,
    marker_message,
    real_message,
)
from services.broker.wire import STORED, to_send_response

log = logging.getLogger(__name__)

PROPERTY_TRAN_OP = "TRAN_OP"
OP_COMMIT = "COMMIT"
OP_ROLLBACK = "ROLLBACK"
OP_CHECK = "CHECK"
_OP_OF = {broker_pb2.TRANSACTION_COMMIT: OP_COMMIT, broker_pb2.TRANSACTION_ROLLBACK: OP_ROLLBACK}
_DECISION_OF: dict[str, Decision] = {op: decision for decision, op in _OP_OF.items()}

LOAD_PULL_MAX_MESSAGES = 1024
"""Records per store Pull while the table is rebuilt."""
CHECKS_PER_ROUND_MAX = 10_000
"""Half messages checked (or given up) in one round at most."""
MARKER_QUERY_MAX = 64
"""Index hits examined when looking for a half message's marker."""


def _no_half(offset: int, group: str) -> NotFound:
    """The one answer for an offset that is not a half message the caller may decide:
    nothing at it, another kind of record, another group's half, or a half of a topic
    the caller may not publish to. It says nothing about the record."""
    return NotFound(
        f"prepared_commitlog_offset: no half message of producer group {group!r} "
        f"this account may decide at {offset}"
    )


class TransactionService:
    """The undecided half messages of one broker, their decisions and checks."""

    def __init__(
        self,
        config: BrokerConfig,
        store: StoreClient,
        role: StoreRole,
        channels: CheckChannels,
        clock_ms: Clock = wall_clock_ms,
    ) -> None:
        self._config = config
        self._store = store
        self._role = role
        self.channels = channels
        self._clock_ms = clock_ms
        self._pending: dict[int, Half] = {}
        self._decided: collections.OrderedDict[int, Decision] = collections.OrderedDict()
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the check-back loop (it rebuilds the table first)."""
        self._task = asyncio.create_task(self._run(), name="transaction-checks")

    async def stop(self) -> None:
        """Stop the check-back loop."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        interval_s = self._config.transaction_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            with runtime.one_round("transaction check round", log):
                try:
                    await self.check_once()
                except BrokerError as exc:
                    log.warning("transaction check round failed: %s", exc)

    # ---------------------------------------------------------------- prepare
    async def prepare(
        self, request: broker_pb2.SendRequest, topic: str, queue_id: int, born_host: str
    ) -> broker_pb2.SendResponse:
        """Store a half message (see the module docstring); its SendResponse names the
        real topic and queue and the half's commitlog offset."""
        if len(request.messages) != 1:
            raise InvalidArgument(
                "messages: a transaction (half) message is sent alone, "
                f"not in a batch of {len(request.messages)}"
            )
        group = check_group("producer_group", request.producer_group)
        message = request.messages[0]
        if message.sys_flag & SYS_FLAG_TRANSACTION_MASK != SYS_FLAG_TRANSACTION_PREPARED:
            raise InvalidArgument(
                "messages[0].sys_flag: clients send PREPARED (0x4) half "
                "messages only; COMMIT and ROLLBACK come from EndTransaction"
            )
        await self._ensure_loaded()
        half = half_record(message, topic, queue_id, group)
        response = await self._store.append([half], born_host)
        if len(response.statuses) != 1:
            raise StoreFailed(grpc.StatusCode.INTERNAL, "store answered no result for the half")
        if response.statuses[0] in STORED:
            offset = response.commitlog_offsets[0]
            self._pending[offset] = Half(
                offset,
                group,
                topic,
                half.properties[PROPERTY_UNIQ_KEY],
                response.store_timestamp_ms or self._clock_ms(),
            )
        # The half's queue offset is in the system topic: meaningless to the producer.
        del response.queue_offsets[:]
        response.queue_offsets.append(-1)
        return to_send_response(response, topic, queue_id, self._config.broker_name)

    # ---------------------------------------------------------------- decide
    async def end(
        self, request: broker_pb2.EndTransactionRequest
    ) -> broker_pb2.EndTransactionResponse:
        """Commit or roll back a half message once; a repeat answers the first decision."""
        group = check_group("producer_group", request.producer_group)
        if request.decision not in _OP_OF:
            raise InvalidArgument("decision: TRANSACTION_COMMIT or TRANSACTION_ROLLBACK")
        offset = request.prepared_commitlog_offset
        if offset < 0:
            raise InvalidArgument(f"prepared_commitlog_offset: {offset} is negative")
        await self._ensure_loaded()
        half = self._pending.get(offset)
        if half is None:
            return await self._not_pending(offset, group)
        if half.group != group or not caller_may(topic_need(half.topic, Perm.PUB)):
            raise _no_half(offset, group)
        marker = await self._settle(half, request.decision)
        return broker_pb2.EndTransactionResponse(
            decision=request.decision, marker_commitlog_offset=marker
        )

    async def _not_pending(self, offset: int, group: str) -> broker_pb2.EndTransactionResponse:
        """A decided half of the caller's answers its decision; anything else is
        :func:`_no_half`, whatever the record at ``offset`` is."""
        got = await self._store.get(store_pb2.GetRequest(commitlog_offset=offset))
        message = got.message
        if (
            not got.found
            or message.commitlog_offset != offset
            or message.topic != TRANS_HALF_TOPIC
            or message.properties.get(PROPERTY_PGROUP, "") != group
            or not caller_may(topic_need(message.properties.get(PROPERTY_REAL_TOPIC, ""), Perm.PUB))
        ):
            raise _no_half(offset, group)
        return broker_pb2.EndTransactionResponse(
            decision=self._decided.get(offset, broker_pb2.TRANSACTION_UNKNOWN),
            already_decided=True,
            marker_commitlog_offset=-1,
        )

    async def _settle(self, half: Half, decision: Decision) -> int:
        """Append the marker, then the op record; the marker's commitlog offset.

        The half leaves the table before the first await (exactly once); it
        comes back only when no marker was stored, so a later call retries.
        """
        del self._pending[half.offset]
        self._remember(half.offset, decision)
        try:
            marker = await self._append_marker(half, decision)
        except BaseException:
            self._pending[half.offset] = half
            self._decided.pop(half.offset, None)
            raise
        await self._append_op(half.offset, _OP_OF[decision])
        return marker

    async def _append_marker(self, half: Half, decision: Decision) -> int:
        got = await self._store.get(store_pb2.GetRequest(commitlog_offset=half.offset))
        if not got.found:
            raise FailedPrecondition(f"the half message at {half.offset} is no longer in the store")
        response = await self._store.append(
            [marker_message(got.message, decision, half.offset)], got.message.born_host
        )
        if not response.statuses or response.statuses[0] not in STORED:
            why = response.errors.get(0) or (
                message_pb2.PutMessageStatus.Name(response.statuses[0])
                if response.statuses
                else "no result"
            )
            raise StoreFailed(
                grpc.StatusCode.UNAVAILABLE, f"store refused the transaction marker: {why}"
            )
        return int(response.commitlog_offsets[0])

    async def _append_op(self, offset: int, op: str) -> None:
        """Record a decision or a check; a failure is logged (see the module docstring:
        a lost decision op is repaired from the marker at the next rebuild)."""
        record = message_pb2.Message(
            topic=TRANS_OP_HALF_TOPIC,
            queue_id=0,
            body=str(offset).encode(),
            tags="d",
            properties={PROPERTY_TRAN_OP: op},
        )
        try:
            response = await self._store.append([record], "")
        except BrokerError as exc:
            log.error("op record %s of half message %d not stored: %s", op, offset, exc)
            return
        if not response.statuses or response.statuses[0] not in STORED:
            log.error(
                "op record %s of half message %d refused: %s",
                op,
                offset,
                response.errors.get(0, "no result"),
            )

    def _remember(self, offset: int, decision: Decision) -> None:
        self._decided[offset] = decision
        self._decided.move_to_end(offset)
        while len(self._decided) > self._config.transaction_decided_cache_max:
            self._decided.popitem(last=False)

    # ---------------------------------------------------------------- check-back
    async def check_once(self) -> int:
        """One round: check (or give up on) every half undecided for too long; how many."""
        if not self._role.is_master:
            self._loaded = False  # rebuilt from the store when this one becomes a master
            return 0
        await self._ensure_loaded()
        now = self._clock_ms()
        timeout = self._config.transaction_timeout_ms
        due = [h for h in self._pending.values() if now - h.last_activity_ms >= timeout]
        for half in due[:CHECKS_PER_ROUND_MAX]:
            if self._pending.get(half.offset) is not half:
                continue  # decided while this round awaited
            if half.check_times >= self._config.transaction_check_max:
                log.warning(
                    "half message %d of group %s still undecided after %d checks: rolled back",
                    half.offset,
                    half.group,
                    half.check_times,
                )
                await self._settle(half, broker_pb2.TRANSACTION_ROLLBACK)
            else:
                await self._check(half, now)
        return len(due)

    async def _check(self, half: Half, now: int) -> None:
        got = await self._store.get(store_pb2.GetRequest(commitlog_offset=half.offset))
        if not got.found:
            log.warning(
                "half message %d of group %s is gone from the store; forgotten",
                half.offset,
                half.group,
            )
            self._pending.pop(half.offset, None)
            return
        check = broker_pb2.TransactionCheck(
            prepared_commitlog_offset=half.offset,
            message=real_message(got.message),
            check_times=half.check_times + 1,
            transaction_id=half.transaction_id,
        )
        client_id = self.channels.push(half.group, check)
        if client_id is None:
            log.debug("no producer of group %s listens for checks", half.group)
            return
        half.check_times += 1
        half.last_activity_ms = now
        await self._append_op(half.offset, OP_CHECK)

    # ---------------------------------------------------------------- rebuild
    async def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        async with self._load_lock:
            if not self._loaded:
                await self._load()
                self._loaded = True

    async def _load(self) -> None:
        """Rebuild the table from the op and half topics (see the module docstring)."""
        decided: dict[int, Decision] = {}
        checks: collections.Counter[int] = collections.Counter()
        async for op in self._read_queue(TRANS_OP_HALF_TOPIC):
            try:
                offset = int(op.body)
            except ValueError:
                log.warning("op record at %d has no half offset; skipped", op.commitlog_offset)
                continue
            kind = op.properties.get(PROPERTY_TRAN_OP, "")
            if kind == OP_CHECK:
                checks[offset] += 1
            elif kind in _DECISION_OF:
                decided[offset] = _DECISION_OF[kind]
        pending: dict[int, Half] = {}
        async for message in self._read_queue(TRANS_HALF_TOPIC):
            offset = message.commitlog_offset
            if offset in decided:
                self._remember(offset, decided[offset])
                continue
            props = message.properties
            half = Half(
                offset,
                props.get(PROPERTY_PGROUP, ""),
                props.get(PROPERTY_REAL_TOPIC, ""),
                props.get(PROPERTY_UNIQ_KEY, ""),
                message.store_timestamp_ms,
                checks[offset],
            )
            decision = await self._find_marker(half)
            if decision is None:
                pending[offset] = half
            else:  # the marker made it, its op record did not: write it now
                self._remember(offset, decision)
                await self._append_op(offset, _OP_OF[decision])
        self._pending = pending
        log.info("transactions: %d undecided half messages, %d decided", len(pending), len(decided))

    async def _read_queue(self, topic: str) -> AsyncIterator[message_pb2.MessageExt]:
        offset = 0
        while True:
            response = await self._store.pull(
                store_pb2.PullRequest(
                    topic=topic,
                    queue_id=0,
                    queue_offset=offset,
                    max_messages=LOAD_PULL_MAX_MESSAGES,
                    subscription="*",
                )
            )
            for message in response.messages:
                yield message
            if response.next_begin_offset <= offset:
                return
            offset = response.next_begin_offset
            if not response.messages and offset >= response.max_offset:
                return

    async def _find_marker(self, half: Half) -> Decision | None:
        """The decision of a marker already stored for ``half``, or None."""
        if not half.topic or not half.transaction_id:
            return None
        found = await self._store.query_by_key(
            store_pb2.QueryByKeyRequest(
                topic=half.topic, key=half.transaction_id, max_count=MARKER_QUERY_MAX
            )
        )
        for message in found.messages:
            kind = message.sys_flag & SYS_FLAG_TRANSACTION_MASK
            if message.prepared_transaction_offset == half.offset and kind in DECISION_OF_FLAG:
                return DECISION_OF_FLAG[kind]
        return None
