"""PullMessage: check topic, queue and group, commit the piggybacked offset, read, long-poll.

The store does the reading and the tag filtering; the broker adds what only
it knows (perm bits, groups, offsets), SQL92 property filters
(:mod:`services.broker.pull.property_filter`) and long polling: when the store says
the queue holds nothing at or after the offset (OFFSET_OVERFLOW_ONE,
NO_MESSAGE_IN_QUEUE, or a queue not yet written) and the client allows a
suspend, the pull is parked in the :class:`LongPollHub` until an arrival
passes its offset or the suspend (capped at ``long_poll_max_ms``) runs out.
A timed-out pull is answered with the store's empty response, so the client
sees the same status it would have seen at once.

PullQueues does the same for up to PULL_QUEUES_MAX queues of one group in one
call: every queue is checked first, and the call is parked only when every
answered queue holds nothing new, on all of them at once (one parked pull,
woken by an arrival on any). A pass asks the store only of the queues that
may have news: a queue the store still watches from the pull's offset is
answered as the store last answered it (:meth:`PullProcessor._read_queues`),
so a consumer of 1,024 queues woken by one arrival costs the store one
queue's read, not 1,024.

A queue an operator reset for the group (:mod:`services.broker.metadata.offset_reset`)
is answered ``OFFSET_RESET`` with the reset offset as ``next_begin_offset``, and
no messages, until the group pulls from that offset; the call is not parked then.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.pull_answer import PULL_QUEUES_MAX, PullAnswer, QueuesAnswer, answer_frame
from boltmq.wire.sql_filter import SQL92, SqlFilter
from services.broker.arrivals.long_poll import ArrivalToken, LongPollHub
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.group_access import GroupAccess
from services.broker.metadata.names import (
    check_expression_type,
    check_sql_filter,
    check_subscription,
)
from services.broker.metadata.offset_reset import OffsetResets
from services.broker.metadata.topic_config import TopicConfig, TopicConfigManager
from services.broker.pull.property_filter import filter_answer, filter_response
from services.broker.pull.read_check import check_queue_count, check_read_queue, readable_topic
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole

PARKABLE = frozenset((message_pb2.OFFSET_OVERFLOW_ONE, message_pb2.NO_MESSAGE_IN_QUEUE))
"""Store answers meaning "nothing yet at this offset": the pull may wait for an arrival."""


def parkable(status: int, queue_offset: int) -> bool:
    """Whether a pull answered with ``status`` may wait for an arrival.

    A queue nobody has written yet does not exist in the store
    (NO_MATCHED_LOGIC_QUEUE); a pull from its start waits like one on an empty
    queue, as RocketMQ answers both with PULL_NOT_FOUND and suspends.
    """
    return status in PARKABLE or (
        status == message_pb2.NO_MATCHED_LOGIC_QUEUE and queue_offset == 0
    )


Answer = TypeVar("Answer")

REPLICA_SUGGESTED = 1
"""suggest_broker_id for "any replica": the SDK picks the group's lowest replica id."""


class PullProcessor:
    """Serves pulls, parking the empty ones."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: GroupAccess,
        offsets: ConsumerOffsetManager,
        store: StoreClient,
        hub: LongPollHub,
        role: StoreRole,
        resets: OffsetResets | None = None,
    ) -> None:
        self._config = config
        self._resets = resets if resets is not None else OffsetResets()
        """Offsets reset for a group that its consumers have not pulled from yet."""
        self._role = role
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._store = store
        self._hub = hub

    async def pull(self, request: broker_pb2.BrokerPullRequest) -> PullAnswer:
        """Answer a pull, parking it while the queue has nothing new.

        The answer keeps the store's encoding, forwarded to the client as it is.
        """
        config = readable_topic(self._topics, "topic", request.topic)
        check_read_queue(config, "queue_id", request.queue_id)
        _check_numbers(request, ("queue_offset", "max_messages", "max_bytes", "suspend_timeout_ms"))
        condition = _condition("subscription", request.subscription, request.expression_type)
        await self._groups.require_consumable("consumer_group", request.consumer_group)
        self._commit(request.consumer_group, request)
        store_request = store_pb2.PullRequest(
            topic=request.topic,
            queue_id=request.queue_id,
            queue_offset=request.queue_offset,
            max_messages=request.max_messages,
            max_bytes=request.max_bytes,
            subscription=request.subscription if condition is None else "*",
            raw_records=request.raw_records,
        )
        offset = request.queue_offset
        group = request.consumer_group

        async def read(_tokens: list[ArrivalToken]) -> tuple[PullAnswer, bool]:
            moved = self._resets.moved_to(group, request.topic, request.queue_id, offset)
            if moved is not None:
                return PullAnswer.parse(_reset_answer(moved).SerializeToString()), False
            answer = await self._store.pull_answer(store_request)
            status = answer.response.status
            if condition is not None:
                answer = filter_answer(answer, condition)
            return answer, parkable(status, offset)

        answer = await self._read_or_park(
            read, [(request.topic, request.queue_id, offset)], request.suspend_timeout_ms
        )
        self._groups.check_consumable("consumer_group", request.consumer_group)
        if self._far_behind(answer.response):
            answer.suggest(REPLICA_SUGGESTED)
        return answer

    async def pull_queues(self, request: broker_pb2.BrokerPullQueuesRequest) -> QueuesAnswer:
        """Answer a pull of several queues, parked while none of them has anything new.

        Every queue is checked before anything is read or committed; the answer
        keeps the store's encoding (StoreService.PullQueues).
        """
        pulls = request.pulls
        check_queue_count("pulls", len(pulls), PULL_QUEUES_MAX)
        _check_numbers(request, ("max_messages", "max_bytes", "suspend_timeout_ms"))
        configs: dict[str, TopicConfig] = {}  # a topic's queues are checked against it once
        seen: dict[tuple[str, int], int] = {}
        conditions: list[SqlFilter | None] = []
        for n, pull in enumerate(pulls):
            topic, queue_id = pull.topic, pull.queue_id
            config = configs.get(topic)
            if config is None:
                config = configs[topic] = readable_topic(self._topics, f"pulls[{n}].topic", topic)
            if not 0 <= queue_id < config.read_queue_nums:
                check_read_queue(config, f"pulls[{n}].queue_id", queue_id)
            if pull.queue_offset < 0:
                raise InvalidArgument(
                    f"pulls[{n}].queue_offset: must not be negative, got {pull.queue_offset}"
                )
            conditions.append(
                _condition(f"pulls[{n}].subscription", pull.subscription, pull.expression_type)
            )
            first = seen.setdefault((topic, queue_id), n)
            if first != n:
                raise InvalidArgument(
                    f"pulls[{n}]: queue {topic}:{queue_id} is pulls[{first}] already"
                )
        await self._groups.require_consumable("consumer_group", request.consumer_group)
        for pull in pulls:
            self._commit(request.consumer_group, pull)
        queues = [(pull.topic, pull.queue_id, pull.queue_offset) for pull in pulls]
        answer = await self._read_or_park(
            lambda tokens: self._read_queues(
                request.consumer_group,
                pulls,
                queues,
                request.max_messages,
                request.max_bytes,
                tokens,
                conditions,
            ),
            queues,
            request.suspend_timeout_ms,
        )
        self._groups.check_consumable("consumer_group", request.consumer_group)
        if any(self._far_behind(response) for response in answer.responses):
            answer.suggest(REPLICA_SUGGESTED)
        return answer

    async def _read_queues(
        self,
        group: str,
        pulls: Sequence[broker_pb2.QueuePull],
        queues: list[tuple[str, int, int]],
        max_messages: int,
        max_bytes: int,
        tokens: list[ArrivalToken],
        conditions: Sequence[SqlFilter | None] | None = None,
    ) -> tuple[QueuesAnswer, bool]:
        """The store's answer to ``pulls`` (``queues`` their (topic, queue_id, offset)), and
        whether no queue has anything new; the store is asked only of the queues that may
        have news: one it watches from the pull's offset has had no arrival since it last
        answered "nothing new" there, and that answer is given again
        (:meth:`LongPollHub.idle_answers`). Answers stop where the store's stop (max_bytes).
        A queue reset for the group is answered OFFSET_RESET, not asked (module docstring).
        ``conditions[i]``: the SQL92 filter of ``pulls[i]`` (None: a tag expression)."""
        conditions = conditions or [None] * len(pulls)
        hub = self._hub
        kept = hub.idle_answers(queues)
        moved = False
        for n, (topic, queue_id, queue_offset) in enumerate(queues):
            offset = self._resets.moved_to(group, topic, queue_id, queue_offset)
            if offset is not None:
                kept[n], moved = (_reset_answer(offset), answer_frame(_reset_answer(offset))), True
        asked = [n for n, answer in enumerate(kept) if answer is None]
        if not asked:
            return QueuesAnswer.assemble(kept), not moved
        read = await self._store.pull_queues_answer(
            store_pb2.PullQueuesRequest(
                max_bytes=max_bytes,
                pulls=[
                    store_pb2.PullRequest(
                        topic=pulls[n].topic,
                        queue_id=pulls[n].queue_id,
                        queue_offset=pulls[n].queue_offset,
                        max_messages=max_messages,
                        subscription=pulls[n].subscription if conditions[n] is None else "*",
                        raw_records=True,
                    )
                    for n in asked
                ],
            )
        )
        idle = not moved
        for n, response in zip(asked, read.responses, strict=False):
            topic, queue_id, queue_offset = queues[n]
            if parkable(response.status, queue_offset):
                hub.remember_idle(
                    topic, queue_id, queue_offset, tokens[n], (response, answer_frame(response))
                )
            else:
                idle = False
        if any(conditions[n] is not None for n in asked):
            read = _filtered(read, [conditions[n] for n in asked])
        if len(asked) == len(pulls):
            return read, idle
        fetched = iter(read.framed())
        answers = []
        for answer in kept:
            if answer is None and (answer := next(fetched, None)) is None:
                break  # the store's answers ran out of max_bytes here
            answers.append(answer)
        return QueuesAnswer.assemble(answers), idle

    def _commit(
        self, group: str, pull: broker_pb2.BrokerPullRequest | broker_pb2.QueuePull
    ) -> None:
        """Commit the offset a pull carries for its queue, if it carries one."""
        if pull.HasField("commit_offset") and pull.commit_offset >= 0:
            self._offsets.commit(group, pull.topic, pull.queue_id, pull.commit_offset)

    def _far_behind(self, response: store_pb2.PullResponse) -> bool:
        """A master's consumer past the lag threshold, when replicas may serve reads."""
        config = self._config
        return (
            config.slave_read_enable
            and self._role.is_master
            and response.max_offset - response.next_begin_offset
            > config.suggest_pulling_from_slave_lag_messages
        )

    async def _read_or_park(
        self,
        read: Callable[[list[ArrivalToken]], Awaitable[tuple[Answer, bool]]],
        queues: list[tuple[str, int, int]],
        suspend_ms: int,
    ) -> Answer:
        """``read(tokens)`` until it answers ``(answer, False)`` (something new) or
        ``suspend_ms`` (capped at long_poll_max_ms) runs out, parked between reads until
        one of ``queues`` (``(topic, queue_id, queue_offset)``) passes its offset;
        ``tokens`` are the queues', taken before each read."""
        # Each pass is caused by an event (first call, an arrival, a stream
        # reconnect), never by a timer; the deadline only bounds the whole wait.
        suspend_ms = min(suspend_ms, self._config.long_poll_max_ms)
        deadline = time.monotonic() + suspend_ms / 1000
        while True:
            tokens = self._hub.tokens(queues)
            answer, idle = await read(tokens)
            if suspend_ms <= 0 or not idle:
                return answer
            woken = await self._hub.wait_any(
                [(*queue, token) for queue, token in zip(queues, tokens, strict=True)],
                deadline - time.monotonic(),
            )
            if not woken:
                return answer


def _reset_answer(offset: int) -> store_pb2.PullResponse:
    """The answer to a pull of a queue reset to ``offset``: OFFSET_RESET, no messages, and
    no queue range (min and max 0: the store was not asked; the broker's lag metric keeps
    the queue end it last saw)."""
    return store_pb2.PullResponse(status=message_pb2.OFFSET_RESET, next_begin_offset=offset)


def _condition(field: str, expression: str, expression_type: str) -> SqlFilter | None:
    """A pull's SQL92 filter (None for a tag expression, which the store applies);
    ``field`` names the expression, its type field is beside it (``expression_type``)."""
    type_field = field.rpartition(".")[0] + "." if "." in field else ""
    type_field += "expression_type"
    check_subscription(field, expression, expression_type, type_field)
    if check_expression_type(type_field, expression_type) != SQL92:
        return None
    return check_sql_filter(field, expression)


def _filtered(read: QueuesAnswer, conditions: Sequence[SqlFilter | None]) -> QueuesAnswer:
    """The store's answers with each SQL92 pull's kept to its matching records
    (``conditions[i]`` is the condition of ``read``'s i-th answer)."""
    answers: list[tuple[store_pb2.PullResponse, bytes | memoryview]] = []
    for (response, frame), condition in zip(read.framed(), conditions, strict=False):
        if condition is None:
            answers.append((response, frame))
        else:
            kept = filter_response(response, condition)
            answers.append((kept, answer_frame(kept)))
    return QueuesAnswer.assemble(answers)


def _check_numbers(request: Any, fields: tuple[str, ...]) -> None:
    for field in fields:
        value = getattr(request, field)
        if value < 0:
            raise InvalidArgument(f"{field}: must not be negative, got {value}")
